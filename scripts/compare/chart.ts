/**
 * A hand-written SVG chart of the side-by-side benchmark: six panels of grouped bars (one group per
 * scenario, one bar per contender), written to docs/img/compare.svg by scripts/compare.ts.
 */
import { CONTENDERS } from './contenders.js';
import type { ContenderId } from './contender.js';
import { short } from './format.js';
import type { RunOutcome } from './runner.js';
import type { Scenario } from './scenarios.js';

const COLORS: Record<ContenderId, string> = {
  'vendor-throttle': '#1b7f5f',
  'bottleneck-reservoir': '#d95f02',
  'bottleneck-mintime': '#fdae6b',
  rlf: '#7570b3',
  'p-queue': '#e7298a',
  zset: '#777777',
};

interface Panel {
  readonly title: string;
  readonly scale: 'linear' | 'log';
  /** Scenarios shown (burst-only measures leave the unconstrained one out). */
  readonly scenarios: readonly Scenario[];
  readonly value: (outcome: RunOutcome) => number | undefined;
  readonly unit: string;
  /** Log scale: the axis starts here at the lowest (smaller values are drawn at it). */
  readonly floor?: number;
}

const WIDTH = 980;
const PANEL_W = 470;
const PANEL_H = 230;
const LEGEND_H = 64;
const PLOT = { left: 52, right: 10, top: 28, bottom: 42 };

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Gridline step for a linear axis up to `max`: 1, 2 or 5 × a power of ten, 3 to 6 lines. */
function niceStep(max: number): number {
  if (!(max > 0)) return 0.25;
  const magnitude = 10 ** Math.floor(Math.log10(max / 4));
  for (const m of [1, 2, 5, 10]) if (m * magnitude * 6 >= max) return m * magnitude;
  return 10 * magnitude;
}

function panel(p: Panel, outcomes: readonly RunOutcome[], contenders: readonly ContenderId[], x0: number, y0: number): string {
  const out: string[] = [];
  const w = PANEL_W - PLOT.left - PLOT.right;
  const h = PANEL_H - PLOT.top - PLOT.bottom;
  const left = x0 + PLOT.left;
  const top = y0 + PLOT.top;
  out.push(`<text x="${x0 + 4}" y="${y0 + 16}" class="title">${escape(p.title)}</text>`);
  const values = p.scenarios.flatMap((s) =>
    contenders.map((c) => {
      const outcome = outcomes.find((o) => o.scenario === s.id && o.contender === c);
      const v = outcome && outcome.failure === undefined ? p.value(outcome) : undefined;
      return v !== undefined && Number.isFinite(v) ? v : undefined;
    }),
  );
  const present = values.filter((v): v is number => v !== undefined);
  let toY: (v: number) => number;
  const ticks: Array<{ v: number; label: string }> = [];
  if (p.scale === 'log') {
    const positive = present.filter((v) => v > 0);
    const lo = p.floor ?? 10 ** Math.floor(Math.log10(Math.min(...positive, 1)));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...positive, lo * 10)));
    const span = Math.log10(hi) - Math.log10(lo);
    toY = (v) => top + h - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / span) * h;
    for (let v = lo; v <= hi * 1.0001; v *= 10) ticks.push({ v, label: short(v, 3) });
  } else {
    const step = niceStep(Math.max(...present, 0));
    const max = Math.max(step, Math.ceil(Math.max(...present, 0) / step - 1e-9) * step);
    toY = (v) => top + h - (v / max) * h;
    for (let v = 0; v <= max + step / 2; v += step) ticks.push({ v, label: short(v, 2) });
  }
  for (const tick of ticks) {
    const y = toY(tick.v).toFixed(1);
    out.push(`<line x1="${left}" x2="${left + w}" y1="${y}" y2="${y}" class="grid"/>`);
    out.push(`<text x="${left - 4}" y="${Number(y) + 3.5}" class="tick" text-anchor="end">${escape(tick.label)}${escape(p.unit)}</text>`);
  }
  const groupW = w / p.scenarios.length;
  const barW = Math.min(14, (groupW - 10) / contenders.length);
  p.scenarios.forEach((scenario, g) => {
    const gx = left + g * groupW + (groupW - barW * contenders.length) / 2;
    contenders.forEach((c, i) => {
      const v = values[g * contenders.length + i];
      const x = gx + i * barW;
      if (v === undefined) {
        out.push(`<text x="${(x + barW / 2).toFixed(1)}" y="${top + h - 3}" class="na" text-anchor="middle">–</text>`);
        return;
      }
      const y = toY(v);
      const height = Math.max(0.8, top + h - y);
      if (v === 0) out.push(`<text x="${(x + barW / 2).toFixed(1)}" y="${top + h - 3}" class="zero" text-anchor="middle">0</text>`);
      out.push(
        `<rect x="${x.toFixed(1)}" y="${(top + h - height).toFixed(1)}" width="${(barW - 1.5).toFixed(1)}" height="${height.toFixed(1)}" fill="${COLORS[c]}"><title>${escape(
          `${CONTENDERS.find((k) => k.id === c)!.label}, ${scenario.title}: ${short(v, 3)}${p.unit}`,
        )}</title></rect>`,
      );
    });
    out.push(
      `<text x="${(left + g * groupW + groupW / 2).toFixed(1)}" y="${top + h + 14}" class="label" text-anchor="middle">${p.scenarios.length > 4 ? scenario.number : `${scenario.number}. ${escape(scenario.id)}`}</text>`,
    );
  });
  out.push(`<line x1="${left}" x2="${left + w}" y1="${top + h}" y2="${top + h}" class="axis"/>`);
  return out.join('\n');
}

export function renderChart(scenarios: readonly Scenario[], outcomes: readonly RunOutcome[], caption: string): string {
  const contenders = CONTENDERS.map((c) => c.id).filter((id) => outcomes.some((o) => o.contender === id));
  const bursts = scenarios.filter((s) => s.shape.kind === 'burst');
  const closed = scenarios.filter((s) => s.shape.kind === 'closed');
  const panels: Panel[] = [
    {
      title: 'Calls silently dropped by the vendor (% of calls, lower is better)',
      scale: 'linear',
      scenarios: bursts,
      unit: '%',
      value: (o) => ((o.dropped ?? NaN) / o.calls) * 100,
    },
    {
      title: 'Quota used: ideal batch time / actual (higher is better)',
      scale: 'linear',
      scenarios: bursts,
      unit: '%',
      value: (o) => (o.utilization ?? NaN) * 100,
    },
    { title: 'Added latency p99, ms (log; lower is better)', scale: 'log', scenarios, unit: '', floor: 1, value: (o) => o.addedP99Ms },
    {
      title: 'Redis commands run per call (log; lower is better)',
      scale: 'log',
      scenarios,
      unit: '',
      floor: 1,
      value: (o) => (o.redisCommandsPerCall > 0 ? o.redisCommandsPerCall : undefined),
    },
    {
      title: 'Redis CPU per call, µs (log; lower is better)',
      scale: 'log',
      scenarios,
      unit: '',
      floor: 1,
      value: (o) => (o.redisCommandsPerCall > 0 ? o.redisCpuUsPerCall : undefined),
    },
    {
      title: 'Decisions per second, no HTTP (log; higher is better)',
      scale: 'log',
      scenarios: closed.length > 0 ? closed : scenarios,
      unit: '',
      value: (o) => o.decisionsPerSec,
    },
  ];
  const rows = Math.ceil(panels.length / 2);
  const height = LEGEND_H + rows * PANEL_H + 40;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="Helvetica, Arial, sans-serif">`,
  );
  out.push(
    '<style>.title{font-size:13px;font-weight:bold;fill:#222}.tick{font-size:10px;fill:#555}.label{font-size:11px;fill:#333}' +
      '.legend{font-size:12px;fill:#222}.note{font-size:11px;fill:#555}.na{font-size:10px;fill:#999}.zero{font-size:9px;fill:#333}.grid{stroke:#e4e4e4;stroke-width:1}.axis{stroke:#888;stroke-width:1}</style>',
  );
  out.push(`<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`);
  out.push(`<text x="10" y="20" class="title">vendor-throttle side by side: same machine, same silent vendor, ${escape(caption)}</text>`);
  const perRow = 4;
  contenders.forEach((c, i) => {
    const x = 10 + (i % perRow) * 240;
    const y = 34 + Math.floor(i / perRow) * 18;
    out.push(`<rect x="${x}" y="${y}" width="12" height="12" fill="${COLORS[c]}"/>`);
    out.push(`<text x="${x + 17}" y="${y + 10.5}" class="legend">${escape(CONTENDERS.find((k) => k.id === c)!.label)}</text>`);
  });
  panels.forEach((p, i) => {
    out.push(panel(p, outcomes, contenders, 10 + (i % 2) * (PANEL_W + 20), LEGEND_H + Math.floor(i / 2) * PANEL_H));
  });
  out.push(`<text x="10" y="${height - 24}" class="note">${escape(scenarios.map((s) => `${s.number}. ${s.id}`).join('  '))}</text>`);
  out.push(
    `<text x="10" y="${height - 8}" class="note">– : not measured (no Redis, or no vendor calls), or the run failed. Numbers and settings: docs/benchmarks.md, "How the side by side measures".</text>`,
  );
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
