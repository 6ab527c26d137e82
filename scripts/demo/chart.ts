/**
 * The demo's chart: for each run, how many calls of the busiest user the vendor saw in the sliding
 * window ending at each moment, against the vendor's limit. A hand-written SVG, no dependencies.
 *
 * `windowSeries()` computes the curve (pure, exact: a step function that changes only when a call
 * enters or leaves the window); `renderChart()` draws one panel per run, side by side, on the same
 * axes, and shades in red what went over the limit (calls the vendor silently dropped).
 */

/** One step of a series: from `t` (ms since the run's first arrival) on, `count` calls were in the window. */
export interface Point {
  readonly t: number;
  readonly count: number;
}

export interface Panel {
  /** E.g. `vendor-throttle (default mode)`. */
  readonly title: string;
  /** One line under the title, e.g. `300 sent · 300 performed · 0 silently dropped`. */
  readonly subtitle: string;
  /** Arrival times at the vendor (any clock, ms), per user. */
  readonly arrivals: ReadonlyMap<string, readonly number[]>;
  /** Stroke color of the curve. */
  readonly color: string;
}

export interface ChartOptions {
  readonly title: string;
  /** Small print at the bottom (set-up, how to reproduce). */
  readonly footnote: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly panels: readonly Panel[];
}

/**
 * Calls in the window (t − windowMs, t] of the busiest user at each moment t, as steps, with times
 * relative to `origin` (default: the earliest arrival). Starts with `{ t: 0, count: 0 }` before the
 * first arrival and ends at 0 once the last call has left the window.
 */
export function windowSeries(arrivals: ReadonlyMap<string, readonly number[]>, windowMs: number, origin?: number): Point[] {
  const lists = [...arrivals.values()].filter((list) => list.length > 0);
  if (lists.length === 0) return [{ t: 0, count: 0 }];
  const start = origin ?? Math.min(...lists.map((list) => Math.min(...list)));
  // A call enters its user's window when it arrives (+1) and leaves windowMs later (−1); at one
  // moment, leaving comes first: the window is open at its start.
  const events = lists.flatMap((list, user) =>
    list.flatMap((a) => [
      { t: a - start, user, delta: 1 },
      { t: a - start + windowMs, user, delta: -1 },
    ]),
  );
  events.sort((a, b) => a.t - b.t || a.delta - b.delta);
  const counts = lists.map(() => 0);
  const points: Point[] = [{ t: 0, count: 0 }];
  for (let i = 0; i < events.length;) {
    const t = events[i]!.t;
    for (; i < events.length && events[i]!.t === t; i++) counts[events[i]!.user]! += events[i]!.delta;
    const count = Math.max(...counts);
    if (count !== points.at(-1)!.count) points.push({ t, count });
  }
  return points;
}

/** Tick step of about `target` ticks over [0, max]: 1, 2 or 5 times a power of ten. */
function niceStep(max: number, target: number): number {
  const raw = max / target;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw)!;
  return step;
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const round = (value: number): string => String(Math.round(value * 10) / 10);

const WIDTH = 960;
const HEIGHT = 400;
const TOP = 78;
const BOTTOM = 62;
const LEFT = 56;
const GAP = 48;
const RIGHT = 24;

/** The chart as a standalone SVG document. */
export function renderChart(options: ChartOptions): string {
  const { limit, windowMs, panels } = options;
  const series = panels.map((panel) => windowSeries(panel.arrivals, windowMs));
  const endMs = Math.max(windowMs, ...series.map((points) => points.at(-1)!.t));
  const peak = Math.max(limit, ...series.flatMap((points) => points.map((p) => p.count)));
  const yStep = niceStep(peak * 1.1, 6);
  const yMax = Math.ceil((peak * 1.1) / yStep) * yStep;
  const xStep = niceStep(endMs / 1000, 6);
  const xMax = Math.ceil(endMs / 1000 / xStep) * xStep;

  const panelWidth = (WIDTH - LEFT - RIGHT - GAP * (panels.length - 1)) / panels.length;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12">`,
    `<title>${escape(options.title)}</title>`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    `<text x="${LEFT}" y="26" font-size="16" font-weight="600" fill="#111827">${escape(options.title)}</text>`,
  ];

  panels.forEach((panel, index) => {
    const points = series[index]!;
    const x0 = LEFT + index * (panelWidth + GAP);
    const x = (ms: number): number => x0 + (ms / 1000 / xMax) * panelWidth;
    const y = (count: number): number => TOP + plotHeight - (count / yMax) * plotHeight;
    const bottom = y(0);
    const limitY = y(limit);
    out.push(`<g>`);
    out.push(`<text x="${round(x0)}" y="${TOP - 26}" font-size="13" font-weight="600" fill="#111827">${escape(panel.title)}</text>`);
    out.push(`<text x="${round(x0)}" y="${TOP - 10}" fill="#4b5563">${escape(panel.subtitle)}</text>`);

    // Grid and axes.
    for (let v = 0; v <= yMax + 1e-9; v += yStep) {
      out.push(`<line x1="${round(x0)}" x2="${round(x0 + panelWidth)}" y1="${round(y(v))}" y2="${round(y(v))}" stroke="#e5e7eb"/>`);
      out.push(`<text x="${round(x0 - 6)}" y="${round(y(v) + 4)}" text-anchor="end" fill="#6b7280">${round(v)}</text>`);
    }
    for (let s = 0; s <= xMax + 1e-9; s += xStep) {
      const at = x(s * 1000);
      out.push(`<line x1="${round(at)}" x2="${round(at)}" y1="${round(bottom)}" y2="${round(bottom + 4)}" stroke="#9ca3af"/>`);
      out.push(`<text x="${round(at)}" y="${round(bottom + 17)}" text-anchor="middle" fill="#6b7280">${round(s)}</text>`);
    }
    out.push(`<line x1="${round(x0)}" x2="${round(x0 + panelWidth)}" y1="${round(bottom)}" y2="${round(bottom)}" stroke="#9ca3af"/>`);
    out.push(
      `<text x="${round(x0 + panelWidth / 2)}" y="${round(bottom + 34)}" text-anchor="middle" fill="#4b5563">seconds since the first call arrived</text>`,
    );

    // The curve as steps, and the area under it above the limit in red (calls the vendor dropped).
    const path: string[] = [`M${round(x(0))},${round(bottom)}`];
    let previous = 0;
    for (const point of points) {
      path.push(`L${round(x(point.t))},${round(y(previous))}`, `L${round(x(point.t))},${round(y(point.count))}`);
      previous = point.count;
    }
    path.push(`L${round(x(xMax * 1000))},${round(y(previous))}`);
    const clip = `over-limit-${index}`;
    out.push(`<clipPath id="${clip}"><rect x="${round(x0)}" y="${TOP}" width="${round(panelWidth)}" height="${round(limitY - TOP)}"/></clipPath>`);
    out.push(
      `<path d="${path.join(' ')} L${round(x(xMax * 1000))},${round(bottom)} Z" fill="#dc2626" fill-opacity="0.25" stroke="none" clip-path="url(#${clip})"/>`,
    );
    out.push(`<path d="${path.join(' ')}" fill="none" stroke="${escape(panel.color)}" stroke-width="1.8" stroke-linejoin="round"/>`);

    // The limit.
    out.push(
      `<line x1="${round(x0)}" x2="${round(x0 + panelWidth)}" y1="${round(limitY)}" y2="${round(limitY)}" stroke="#dc2626" stroke-width="1.5" stroke-dasharray="6 4"/>`,
    );
    out.push(
      `<text x="${round(x0 + panelWidth - 4)}" y="${round(limitY - 6)}" text-anchor="end" fill="#dc2626">vendor limit ${limit} per ${windowMs} ms</text>`,
    );
    out.push(`</g>`);
  });

  out.push(
    `<text x="14" y="${round(TOP + plotHeight / 2)}" transform="rotate(-90 14 ${round(TOP + plotHeight / 2)})" text-anchor="middle" fill="#4b5563">calls in the last ${windowMs} ms (busiest user)</text>`,
  );
  out.push(`<text x="${LEFT}" y="${HEIGHT - 10}" font-size="11" fill="#6b7280">${escape(options.footnote)}</text>`);
  out.push('</svg>', '');
  return out.join('\n');
}
