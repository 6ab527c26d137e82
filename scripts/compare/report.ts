/** The Markdown tables of the side-by-side benchmark. */
import { ruleLabel } from './contender.js';
import { contenderById } from './contenders.js';
import { num, percent, short } from './format.js';
import type { RunOutcome } from './runner.js';
import { burstCount, type Scenario } from './scenarios.js';

const COLUMNS = [
  'contender',
  'dropped by vendor',
  'quota used',
  'batch s',
  'decisions/s',
  'added p50 ms',
  'added p99 ms',
  'cmds sent/call',
  'Redis cmds/call',
  'inside Redis/call',
  'Redis CPU µs/call',
  'Redis bytes/user',
  'worker CPU µs/call',
] as const;

/** One line saying what the scenario does. */
export function describeScenario(scenario: Scenario, workers: number): string {
  const rules = scenario.rules.map(ruleLabel).join(' + ');
  const { shape } = scenario;
  const redis = scenario.redisDelayMs ? `; Redis behind a proxy adding ${scenario.redisDelayMs.min}–${scenario.redisDelayMs.max} ms each way` : '';
  const processes = Math.min(workers, scenario.processes ?? workers);
  if (shape.kind === 'closed') {
    return (
      `${num(shape.users)} users round-robin, ${processes} processes × ${shape.concurrency} calls in flight, rule ${rules} per user, ` +
      `\`fn\` does nothing (no HTTP); ${num(shape.warmMs / 1000, 1)} s warm-up (at least one call per user), ${num(shape.measureMs / 1000, 1)} s measured${redis}.`
    );
  }
  const perUser = burstCount(shape, processes);
  const split =
    shape.totalPerUser === undefined
      ? `${processes} processes × ${shape.callsPerUser} calls per user`
      : `${perUser} calls per user split over ${processes} processes`;
  const tail = scenario.vendorTail ? `, ${num(scenario.vendorTail.share * 100)} % of calls ${num(scenario.vendorTail.ms)} ms` : '';
  const send = scenario.sendDelayMs ? `; each request leaves ${scenario.sendDelayMs.min}–${scenario.sendDelayMs.max} ms (uniform) after its call starts` : '';
  const skew = scenario.clockSkewMs
    ? `; worker wall clocks skewed +${num(scenario.clockSkewMs)} ms (even-numbered workers) and −${num(scenario.clockSkewMs)} ms (odd)`
    : '';
  const calls = scenario.noHttp
    ? "`fn` does nothing (no HTTP): drops and quota counted on the calls' start times"
    : `vendor latency ${scenario.vendorLatencyMs.min}–${scenario.vendorLatencyMs.max} ms${tail}${send}`;
  return (
    `${num(shape.users)} user${shape.users === 1 ? '' : 's'}, ${split} released at once ` +
    `(${num(perUser * shape.users)} calls), rule ${rules} per user, ${calls}${skew}${redis}.`
  );
}

function row(outcome: RunOutcome, scenario: Scenario): string[] {
  const contender = contenderById(outcome.contender);
  const name = outcome.contender === 'vendor-throttle' ? `**${contender.label}**` : contender.label;
  if (outcome.failure !== undefined) return [name, `failed: ${outcome.failure.split('\n')[0]!.slice(0, 120)}`, ...COLUMNS.slice(2).map(() => '')];
  const burst = scenario.shape.kind === 'burst';
  const noRedis = outcome.redisCommandsPerCall === 0;
  return [
    name,
    burst ? `${num(outcome.dropped)} (${percent((outcome.dropped ?? 0) / outcome.calls, 1)})` : '–',
    burst ? percent(outcome.utilization) : '–',
    burst ? num(outcome.batchSeconds, 2) : '–',
    num(outcome.decisionsPerSec),
    short(outcome.addedP50Ms, 1),
    short(outcome.addedP99Ms, 1),
    short(outcome.sentPerCall, 2),
    noRedis ? '0' : short(outcome.redisCommandsPerCall, 1),
    noRedis ? '0' : short(outcome.innerCommandsPerCall, 1),
    noRedis ? '0' : short(outcome.redisCpuUsPerCall, 1),
    num(outcome.redisBytesPerUser),
    num(outcome.workerCpuUsPerCall),
  ];
}

export function scenarioTable(scenario: Scenario, outcomes: readonly RunOutcome[], workers: number): string {
  const out: string[] = [];
  out.push(`### ${scenario.number}. ${scenario.title}`, '');
  let line = describeScenario(scenario, workers);
  const ideal = outcomes.find((o) => o.idealSeconds !== undefined)?.idealSeconds;
  if (ideal !== undefined) line += ` Ideal batch time ${num(ideal, 2)} s per user.`;
  if (scenario.floor !== undefined) line += ` Floor of quota use aimed at: ${percent(scenario.floor)}.`;
  const tails = outcomes.filter((o) => o.tailCalls !== undefined).map((o) => o.tailCalls!);
  if (tails.length > 0) line += ` Calls that took the tail's latency: ${tails.map((t) => num(t)).join(', ')} (per run, in table order).`;
  const skews = outcomes.filter((o) => o.observedSkewsMs !== undefined).map((o) => o.observedSkewsMs!.map((ms) => `${ms > 0 ? '+' : ''}${num(ms)}`).join('/'));
  if (skews.length > 0) line += ` Skew seen in the workers (ms): ${skews.join(', ')} (per run, in table order).`;
  out.push(line, '');
  out.push(`| ${COLUMNS.join(' | ')} |`);
  out.push(
    `| --- | ${COLUMNS.slice(1)
      .map(() => '---:')
      .join(' | ')} |`,
  );
  for (const outcome of outcomes) out.push(`| ${row(outcome, scenario).join(' | ')} |`);
  const errors = outcomes.filter((o) => o.errors > 0);
  if (errors.length > 0) {
    out.push('');
    for (const o of errors) out.push(`- ${contenderById(o.contender).label}: ${num(o.errors)} calls failed (${o.firstErrors.join('; ')})`);
  }
  return out.join('\n');
}

/** How each contender was configured, per distinct rule set. */
export function configurations(scenarios: readonly Scenario[], outcomes: readonly RunOutcome[]): string {
  const out: string[] = ['### How each contender was configured', ''];
  const seen = new Set<string>();
  for (const scenario of scenarios) {
    const lines = outcomes.filter((o) => o.scenario === scenario.id).map((o) => `  - ${contenderById(o.contender).label}: ${o.config}`);
    const key = lines.join('\n');
    if (lines.length === 0 || seen.has(key)) continue;
    seen.add(key);
    out.push(`- ${scenario.rules.map(ruleLabel).join(' + ')} (scenario ${scenario.number}):`, ...lines);
  }
  return out.join('\n');
}

export const MEASURES = `Measures: *dropped by vendor*: calls the simulated vendor answered 200 OK but did not perform
(silent per-user limit, every rule checked at the call's arrival). *quota used*: ideal batch time / actual
batch time (first to last arrival at the vendor), summed over users; the ideal is when the last call could
start under a perfect limiter that knows every rule. *batch s*: the slowest user's first to last arrival.
*decisions/s*: calls started per second (burst: from the release to the last start). *added p50/p99*:
a call's start minus its ideal start (release + the ideal offset of its rank among the user's starts);
negative when it started earlier than the rules allow. In the unconstrained scenario the ideal is 0,
so this is the time from asking to starting. *cmds sent/call*: commands the worker's clients sent
(scripts, MULTI/EXEC and pub/sub included, also on the connections a library duplicates). *Redis cmds/call*:
\`INFO commandstats\` delta, commands run inside Lua scripts included. *inside Redis/call*: the same less the
commands that run scripts (EVALSHA, EVAL, FCALL), i.e. what the scripts run plus any plain command. *Redis CPU µs/call*: \`INFO cpu\` (user + sys) delta per call, less what the idle server used over
the same time (measured at the start). *worker CPU µs/call*: CPU of the worker processes per call
(the limiter's client side; in bursts also the HTTP call to the vendor).
*Redis bytes/user*: \`MEMORY USAGE\` of every key during the run (largest of three readings at 30, 55
and 80 % of the ideal time), per user.`;
