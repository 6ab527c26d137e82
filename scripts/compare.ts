/**
 * Side by side: vendor-throttle against the limiters users would otherwise reach for, on the same
 * machine, the same simulated vendor with a silent per-user limit (scripts/sim-vendor.ts), and
 * several worker processes sharing one Redis.
 *
 *   npx tsx scripts/compare.ts              # about 6 minutes on 2 cores
 *   npx tsx scripts/compare.ts --quick      # smaller batches, shorter runs
 *   npx tsx scripts/compare.ts --help       # options (workers, scenarios, contenders, output files)
 *
 * Starts its own redis-server on a free port (never the one on 6379) and stops it before exiting,
 * and one worker process per `--workers` (scripts/compare/worker.ts), reused for every run. Each run
 * puts one contender in every worker, empties Redis, starts a fresh vendor and releases the load.
 * Contenders: scripts/compare/contender-*.ts; scenarios: scripts/compare/scenarios.ts. Prints one
 * Markdown table per scenario on stdout (progress on stderr), then the quota used per scenario and
 * the cost per call of vendor-throttle beside rate-limiter-flexible (scripts/compare/summary.ts),
 * and writes an SVG chart to docs/img/compare.svg. `COMPARE_DEBUG=1` passes the workers' stderr through, with their progress.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { machineInfo, type MachineInfo } from './bench/machine.js';
import { renderChart } from './compare/chart.js';
import { CONTENDER_IDS, type ContenderId } from './compare/contender.js';
import { num } from './compare/format.js';
import { WorkerPool } from './compare/pool.js';
import { configurations, MEASURES, scenarioTable } from './compare/report.js';
import { costTable, quotaTable } from './compare/summary.js';
import { idleCpu } from './compare/redis-usage.js';
import { runOne, type RunContext, type RunOutcome } from './compare/runner.js';
import { SCENARIO_IDS, scenarios as allScenarios, warmUpScenario, type ScenarioId } from './compare/scenarios.js';
import { startRedis } from './support/redis-server.js';
import { cleanUpOnSignal, readFlags, settingsOrUsage, UsageError } from './support/usage.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

interface Settings {
  readonly quick: boolean;
  readonly workers: number;
  readonly scenarios: readonly ScenarioId[];
  readonly contenders: readonly ContenderId[];
  /** Where the chart goes; undefined: no chart. */
  readonly svg: string | undefined;
  /** Where the raw outcomes go as JSON; undefined: nowhere. */
  readonly json: string | undefined;
}

const USAGE = `Usage: npx tsx scripts/compare.ts [--quick] [--workers=4] [--scenarios=LIST] [--contenders=LIST]
                              [--svg=docs/img/compare.svg | --no-svg] [--json=FILE]
  --quick        smaller batches and shorter runs
  --workers      worker processes sharing the Redis (default 4)
  --scenarios    ${SCENARIO_IDS.join(',')}
  --contenders   ${CONTENDER_IDS.join(',')}
  --svg          where to write the chart (default docs/img/compare.svg); --no-svg: none
  --json         also write every measure as JSON to this file`;

function parseSettings(argv: readonly string[]): Settings {
  const flags = readFlags(argv, ['quick', 'workers', 'scenarios', 'contenders', 'svg', 'no-svg', 'json']);
  const list = <T extends string>(name: string, all: readonly T[]): T[] => {
    const text = flags.get(name);
    if (text === undefined) return [...all];
    const values = text.split(',').filter(Boolean);
    for (const value of values) {
      if (!all.includes(value as T)) throw new UsageError(`Expected --${name} to list some of ${all.join(', ')}, got '${value}'`);
    }
    return all.filter((value) => values.includes(value));
  };
  const workersText = flags.get('workers') ?? '4';
  const workers = Number(workersText);
  if (!Number.isInteger(workers) || workers < 1 || workers > 32)
    throw new UsageError(`Expected --workers to be a whole number from 1 to 32, got '${workersText}'`);
  const svg = flags.has('no-svg') ? undefined : resolve(ROOT, flags.get('svg') ?? 'docs/img/compare.svg');
  const json = flags.get('json');
  return {
    quick: flags.get('quick') === 'true',
    workers,
    scenarios: list('scenarios', SCENARIO_IDS),
    contenders: list('contenders', CONTENDER_IDS),
    svg,
    json: json === undefined ? undefined : resolve(json),
  };
}

const log = (message: string): void => {
  process.stderr.write(`[compare] ${message}\n`);
};

/** The command that produced this report, in Markdown. */
function commandLine(): string {
  const args = process.argv.slice(2).join(' ');
  const direct = `\`npx tsx scripts/compare.ts${args ? ` ${args}` : ''}\``;
  return process.env.npm_lifecycle_event === 'bench' ? `\`npm run bench\` (its first half: ${direct})` : direct;
}

function header(machine: MachineInfo, settings: Settings): string {
  return [
    '# vendor-throttle side by side',
    '',
    `Command: ${commandLine()}`,
    '',
    `Machine: ${machine.cpuModel} (${machine.cores} logical cores${machine.physicalCores ? `, ${machine.physicalCores} physical` : ''}), ` +
      `${machine.totalMemoryGiB} GiB, ${machine.platform}; Node ${machine.node}; redis-server ${machine.redis} (private, 127.0.0.1, no persistence). ` +
      `${settings.workers} worker processes, the simulated vendor and Redis share these cores.`,
  ].join('\n');
}

async function main(): Promise<void> {
  const settings = settingsOrUsage(() => parseSettings(process.argv.slice(2)), USAGE);
  if (settings === undefined) return;
  const startedAt = performance.now();
  const scenarios = allScenarios(settings.quick).filter((s) => settings.scenarios.includes(s.id));
  log('starting a private redis-server');
  const server = await startRedis();
  const pool = new WorkerPool(settings.workers);
  log(`redis-server on port ${server.port} (pid ${server.pid}); ${settings.workers} workers (pids ${pool.pids.join(', ')})`);
  const detachSignals = cleanUpOnSignal(() => {
    pool.kill();
    return server.stop();
  });
  const control = new Redis({ host: '127.0.0.1', port: server.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await control.connect();
    const machine = await machineInfo(control);
    const idleCpuPerSecond = await idleCpu(control, settings.quick ? 1000 : 2000);
    log(`idle redis-server CPU: ${num(idleCpuPerSecond * 1000, 2)} ms/s`);
    const ctx: RunContext = { pool, control, redisPort: server.port, idleCpuPerSecond, sequence: 0 };
    // Only the contenders some chosen scenario runs are warmed up.
    const used = settings.contenders.filter((c) => scenarios.some((s) => s.contenders?.includes(c) ?? true));
    for (const contender of used) {
      log(`warm-up: ${contender}`);
      const outcome = await runOne(ctx, warmUpScenario(), contender);
      if (outcome.failure !== undefined) log(`   failed: ${outcome.failure}`);
    }
    const outcomes: RunOutcome[] = [];
    const sections: string[] = [];
    for (const scenario of scenarios) {
      const these: RunOutcome[] = [];
      for (const contender of settings.contenders.filter((c) => scenario.contenders?.includes(c) ?? true)) {
        log(`${scenario.number}. ${scenario.id}: ${contender}`);
        const outcome = await runOne(ctx, scenario, contender);
        these.push(outcome);
        log(
          outcome.failure !== undefined
            ? `   failed: ${outcome.failure}`
            : `   ${num(outcome.calls)} calls${outcome.dropped !== undefined ? `, dropped ${outcome.dropped}` : ''}` +
                `${outcome.utilization !== undefined ? `, quota used ${num(outcome.utilization * 100)} %` : ''}, ` +
                `${num(outcome.decisionsPerSec)} decisions/s, ${num(outcome.sentPerCall, 2)} sent/call, ${num(outcome.innerCommandsPerCall, 1)} inside Redis/call, ${num(outcome.wallSeconds, 1)} s`,
        );
      }
      outcomes.push(...these);
      sections.push(scenarioTable(scenario, these, settings.workers));
    }
    const wallSeconds = (performance.now() - startedAt) / 1000;
    const report = [
      header(machine, settings),
      ...sections,
      quotaTable(scenarios, outcomes),
      costTable(scenarios, outcomes),
      configurations(scenarios, outcomes),
      MEASURES,
      `Total wall time ${num(wallSeconds, 0)} s.`,
    ].join('\n\n');
    process.stdout.write(`${report}\n`);
    if (settings.svg) {
      mkdirSync(dirname(settings.svg), { recursive: true });
      writeFileSync(settings.svg, renderChart(scenarios, outcomes, `${settings.workers} processes sharing one Redis${settings.quick ? ' (--quick)' : ''}`));
      log(`chart written to ${settings.svg}`);
    }
    if (settings.json) writeFileSync(settings.json, `${JSON.stringify({ machine, command: commandLine(), settings, outcomes }, null, 2)}\n`);
  } finally {
    await pool.stop();
    control.disconnect();
    await server.stop();
    detachSignals();
    log('workers and redis-server stopped');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
