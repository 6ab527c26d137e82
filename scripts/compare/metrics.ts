/** Pure measures of one run: the ideal schedule, drops at a vendor with several rules, percentiles. */
import type { Rule } from './contender.js';

/**
 * Start offsets (ms after release) of `count` calls of one user under a perfect limiter that
 * knows every rule: call k starts as early as every rule allows, i.e. at
 * `max(0, offset[k − N] + T)` over the rules {N, T}. The last one is the ideal batch time.
 */
export function idealOffsets(count: number, rules: readonly Rule[]): number[] {
  const offsets: number[] = [];
  for (let k = 0; k < count; k++) {
    let at = 0;
    for (const rule of rules) if (k >= rule.limit) at = Math.max(at, offsets[k - rule.limit]! + rule.windowMs);
    offsets.push(at);
  }
  return offsets;
}

/**
 * The quota an exact limiter with perfect knowledge would have used with these very calls: each
 * call (in the order they started) takes its measured duration, start to response, and starts as
 * soon as every rule allows given the earlier calls' responses, known the instant they happen
 * (a call counts from its start until T after its response). Returns the replayed time from the
 * first start to the last: the shortest batch time any exact limiter reaches with these durations.
 */
export function exactReplayMs(durations: readonly number[], rules: readonly Rule[]): number {
  const releases: number[] = [];
  let start = 0;
  for (let k = 0; k < durations.length; k++) {
    start = 0;
    if (k > 0) {
      const sorted = [...releases].sort((a, b) => a - b);
      for (const rule of rules) if (k >= rule.limit) start = Math.max(start, sorted[k - rule.limit]! + rule.windowMs);
    }
    releases.push(start + durations[k]!);
  }
  return start;
}

/**
 * How unevenly the processes sharing a user were served: per process, the median start of its calls
 * (ms after the user's first start); the spread is (latest median − earliest median) ÷ the user's
 * first-to-last start time. With equal loads, first asked first served across processes gives each
 * process calls all along the batch, so medians near the middle and a spread near 0; one process
 * served entirely before another gives about 0.5, and more when it goes further.
 */
export function processSpread(startsByProcess: ReadonlyArray<readonly number[]>): number | undefined {
  const all = startsByProcess.flat();
  const busy = startsByProcess.filter((starts) => starts.length > 0);
  if (busy.length < 2 || all.length < 2) return undefined;
  const first = Math.min(...all);
  const span = Math.max(...all) - first;
  if (!(span > 0)) return undefined;
  const medians = busy.map(
    (starts) =>
      percentile(
        [...starts].sort((a, b) => a - b),
        50,
      ) - first,
  );
  return (Math.max(...medians) - Math.min(...medians)) / span;
}

/**
 * Arrivals a silent vendor drops when it enforces every rule: in time order, an arrival is
 * dropped when, for some rule {N, T}, N performed calls already lie in (a − T, a]. Dropped calls
 * are not performed. With one rule this is scripts/sim-vendor.ts `vendorDrops`.
 */
export function dropsUnderRules(arrivals: readonly number[], rules: readonly Rule[]): number {
  const sorted = [...arrivals].sort((a, b) => a - b);
  const performed: number[] = [];
  let dropped = 0;
  for (const a of sorted) {
    let full = false;
    for (const rule of rules) {
      // performed is ascending: count those after a − T from the end.
      let inWindow = 0;
      for (let i = performed.length - 1; i >= 0 && performed[i]! > a - rule.windowMs; i--) inWindow++;
      if (inWindow >= rule.limit) {
        full = true;
        break;
      }
    }
    if (full) dropped++;
    else performed.push(a);
  }
  return dropped;
}

/** Nearest-rank percentile of ascending `sorted` (NaN when empty). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
