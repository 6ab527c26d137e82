import { SingleBar } from 'cli-progress';
import { isConcurrent, parseRule, type Rule, type RuleString } from '../rules.js';
import { ruleSource } from './args.js';

export interface ProgressOptions {
  /** Requests this run sends. */
  readonly total: number;
  /** Print nothing. */
  readonly quiet: boolean;
  /** Where to draw: a live bar on a terminal, else a plain line every `step` percent. */
  readonly stream: NodeJS.WriteStream;
  /** @default 10 */
  readonly step?: number;
  /** What the ETA is worked out from. Without it (or when no key has a rule with a window): the observed rate. */
  readonly plan?: ProgressPlan;
}

/** The requests of a run and the rules of their keys: what the ETA is worked out from. */
export interface ProgressPlan {
  /** The requests this run sends (the `total`): which keys each counts in, and how many slots it takes. */
  readonly requests: readonly PlannedRequest[];
  /** The rules the throttle applies to a key (see {@link rulesOfRun}). */
  readonly rules: (key: string) => readonly Rule[];
  /** Requests in flight at most at once, over every worker (`--workers` × `--concurrency`). @default no cap */
  readonly concurrency?: number;
  /** Calls an earlier run made that may still count in the windows (`--resume` without Redis). */
  readonly earlier?: readonly EarlierCall[];
}

export interface PlannedRequest {
  readonly id: string | number;
  readonly key: string;
  /** More keys the request counts in (an app-wide key). */
  readonly also: readonly string[];
  /** Slots the request takes. */
  readonly cost: number;
}

export interface EarlierCall {
  readonly key: string;
  readonly also?: readonly string[];
  /** Slots it took. */
  readonly slots: number;
  /** How long ago it completed (ms). */
  readonly agoMs: number;
}

/** What `tick` needs of a result line: its request, how often it was sent, how long the last attempt took. */
export interface TickResult {
  readonly id: string | number;
  /** Attempts sent; 0 for a request refused before its first. @default 1 */
  readonly attempts?: number;
  /** Duration of the last attempt; null when it was never sent. */
  readonly ms?: number | null;
}

/** Rate over the last this many ms. */
const RATE_WINDOW_MS = 10_000;
/** The bar asks for the ETA on every result; it is worked out again at most this often (the bar draws 5 times a second). */
const ETA_REFRESH_MS = 200;

/**
 * Progress of a run on stderr: a live bar with rate and ETA (cli-progress) on a terminal; a plain
 * line every 10 % otherwise (logs, CI); nothing with `quiet`.
 *
 * The ETA comes from the rules ({@link Progress.eta}): the observed rate is wrong whenever the run
 * is bound by them, since the opening burst uses a whole window of quota at once.
 */
export class Progress {
  readonly #options: ProgressOptions;
  readonly #bar: SingleBar | undefined;
  /** (time, results) pairs; the first is the last one at or before the start of the rate window. */
  readonly #samples: Array<{ at: number; done: number }> = [{ at: performance.now(), done: 0 }];
  /** Every key of the plan that has a rule with a window; `#pending` those with slots still to send. */
  readonly #keys = new Map<string, KeyLog>();
  readonly #pending = new Set<KeyLog>();
  readonly #requests = new Map<string, PlannedRequest>();
  /** Sum and count of the durations of the results' last attempts: the latency the ETA adds per window. */
  #msSum = 0;
  #msCount = 0;
  #done = 0;
  #failed = 0;
  #refused = 0;
  #nextLine: number;
  #cached: { at: number; text: string; refreshMs: number } | undefined;

  constructor(options: ProgressOptions) {
    this.#options = options;
    const step = options.step ?? 10;
    this.#nextLine = step;
    if (options.plan !== undefined) this.#load(options.plan);
    if (!options.quiet && options.stream.isTTY && options.total > 0) {
      this.#bar = new SingleBar({
        stream: options.stream,
        format: '{bar} {percentage}% | {value}/{total} | {rate}/s | ETA {eta_text} | {failures}',
        barCompleteChar: '\u2588',
        barIncompleteChar: '\u2591',
        hideCursor: true,
        fps: 5,
      });
      this.#bar.start(options.total, 0, this.#payload());
    }
  }

  /**
   * One more result: a success, a failure, or a request refused by `--max-delay-ms` (not sent). With
   * `result`, its request's slots leave the keys' work and enter their current windows.
   */
  tick(outcome: 'ok' | 'failed' | 'refused', result?: TickResult): void {
    this.#done += 1;
    if (outcome === 'failed') this.#failed += 1;
    else if (outcome === 'refused') this.#refused += 1;
    const now = performance.now();
    this.#samples.push({ at: now, done: this.#done });
    while (this.#samples.length > 1 && this.#samples[1]!.at <= now - RATE_WINDOW_MS) this.#samples.shift();
    if (result !== undefined) this.#record(result, now);
    if (this.#bar) {
      this.#bar.update(this.#done, this.#payload(now));
      return;
    }
    if (this.#options.quiet || this.#options.total === 0) return;
    const percent = (100 * this.#done) / this.#options.total;
    if (percent + 1e-9 < this.#nextLine && this.#done < this.#options.total) return;
    const step = this.#options.step ?? 10;
    while (this.#nextLine <= percent + 1e-9) this.#nextLine += step;
    const { rate, eta_text: eta, failures } = this.#payload();
    this.#options.stream.write(`vendor-throttle: ${Math.floor(percent)}% (${this.#done}/${this.#options.total}), ${rate}/s, ETA ${eta}, ${failures}\n`);
  }

  /** Removes the bar (leaving its last state on screen). */
  stop(): void {
    this.#bar?.stop();
  }

  /** Results per second over the last 10 s. */
  rate(): number {
    const now = performance.now();
    const anchor = this.#samples[0]!;
    return now > anchor.at ? (1000 * (this.#done - anchor.done)) / (now - anchor.at) : 0;
  }

  /**
   * Seconds until the last request is done; undefined when nothing tells yet. The largest of:
   * - for each key, the time its rules need for the slots it has left ({@link KeyLog.lastDone}):
   *   keys run in parallel, so the slowest key is the run's;
   * - the time `concurrency` requests at a time need at the mean latency so far.
   * When neither says anything (no rule with a window, no latency yet): the remaining requests at
   * the observed rate, as without a plan.
   */
  eta(): number | undefined {
    const left = this.#options.total - this.#done;
    if (left <= 0) return 0;
    const now = performance.now();
    const latency = this.#msCount === 0 ? 0 : this.#msSum / this.#msCount;
    let end = now;
    for (const log of this.#pending) end = Math.max(end, log.lastDone(now, latency));
    const concurrency = this.#options.plan?.concurrency;
    const waves = concurrency === undefined ? 0 : Math.ceil(left / concurrency) * latency;
    const seconds = Math.max(end - now, waves) / 1000;
    if (seconds > 0) return seconds;
    const rate = this.rate();
    return rate > 0 ? left / rate : undefined;
  }

  /** Indexes the plan's requests, and the slots each key has to send and has sent lately. */
  #load(plan: ProgressPlan): void {
    const now = performance.now();
    const logOf = (key: string): KeyLog | undefined => {
      let log = this.#keys.get(key);
      if (log === undefined) {
        const rules = plan.rules(key);
        if (rules.length === 0) return undefined;
        log = new KeyLog(rules);
        this.#keys.set(key, log);
      }
      return log;
    };
    for (const request of plan.requests) {
      this.#requests.set(String(request.id), request);
      for (const key of [request.key, ...request.also]) {
        const log = logOf(key);
        if (log === undefined) continue;
        log.left += request.cost;
        log.cost = Math.max(log.cost, request.cost);
        this.#pending.add(log);
      }
    }
    // Oldest first: a key's log is in time order.
    for (const call of [...(plan.earlier ?? [])].sort((a, b) => b.agoMs - a.agoMs)) {
      for (const key of [call.key, ...(call.also ?? [])]) this.#keys.get(key)?.add(now - call.agoMs, call.slots);
    }
  }

  /** A result: its request no longer waits, and the slots it took count in its keys' windows from now. */
  #record(result: TickResult, now: number): void {
    if (typeof result.ms === 'number' && Number.isFinite(result.ms)) {
      this.#msSum += result.ms;
      this.#msCount += 1;
    }
    const request = this.#requests.get(String(result.id));
    if (request === undefined) return;
    this.#requests.delete(String(result.id));
    for (const key of [request.key, ...request.also]) {
      const log = this.#keys.get(key);
      if (log === undefined) continue;
      log.left -= request.cost;
      log.add(now, (result.attempts ?? 1) * request.cost);
      if (log.left <= 0) {
        this.#pending.delete(log);
        log.clear();
      } else log.trim(now);
    }
  }

  #payload(now = performance.now()): { rate: string; eta_text: string; failures: string } {
    const rate = this.rate();
    const left = this.#options.total - this.#done;
    // Refusals only when there are some: most runs have no --max-delay-ms.
    const failures = `${this.#failed} failed${this.#refused > 0 ? `, ${this.#refused} refused` : ''}`;
    return { rate: rate.toFixed(1), eta_text: left === 0 ? '0 s' : this.#etaText(now), failures };
  }

  /**
   * The ETA as shown; the bar's (drawn on every result) worked out again at most every 200 ms, or
   * every 20 times as long as it took last (a run of many keys): 5 % of the time at most.
   */
  #etaText(now: number): string {
    if (this.#bar !== undefined && this.#cached !== undefined && now - this.#cached.at < this.#cached.refreshMs) return this.#cached.text;
    const seconds = this.eta();
    const text = seconds === undefined ? '?' : formatSeconds(seconds);
    this.#cached = { at: now, text, refreshMs: Math.max(ETA_REFRESH_MS, 20 * (performance.now() - now)) };
    return text;
  }
}

/**
 * One key: the slots it has left to send, and when the slots it sent lately completed (in time
 * order, `upTo` counting the slots through each). The throttle counts a slot in a window from its
 * booking until `windowMs` after its completion (docs/design.md §2), so a completion is what frees.
 */
class KeyLog {
  left = 0;
  /** The largest cost of the key's requests: a window holds whole requests only. */
  cost = 1;
  /** Windowed rules; and the smallest cap on calls in flight ('N concurrent'), Infinity for none. */
  readonly #rules: readonly Rule[];
  readonly #inFlight: number;
  readonly #longest: number;
  #at: number[] = [];
  #upTo: number[] = [];
  /** Entries before `#head` are out of every window; `#dropped` counts the slots of those removed. */
  #head = 0;
  #dropped = 0;

  constructor(rules: readonly Rule[]) {
    this.#rules = rules.filter((rule) => !isConcurrent(rule));
    this.#inFlight = Math.min(...rules.filter(isConcurrent).map((rule) => rule.limit));
    this.#longest = Math.max(0, ...this.#rules.map((rule) => rule.windowMs));
  }

  add(at: number, slots: number): void {
    if (slots <= 0) return;
    this.#at.push(at);
    this.#upTo.push(this.#total() + slots);
  }

  /** Forgets completions older than the longest window. */
  trim(now: number): void {
    while (this.#head < this.#at.length && this.#at[this.#head]! <= now - this.#longest) this.#head += 1;
    if (this.#head > 64 && 2 * this.#head > this.#at.length) {
      this.#dropped = this.#upTo[this.#head - 1]!;
      this.#at = this.#at.slice(this.#head);
      this.#upTo = this.#upTo.slice(this.#head);
      this.#head = 0;
    }
  }

  clear(): void {
    this.#dropped = this.#total();
    this.#at = [];
    this.#upTo = [];
    this.#head = 0;
  }

  /**
   * When the key's last slot left should be done, as the slowest of its rules has it: with `L`
   * slots per window `W`, a call's duration `d` (`latency`), and the slots of the current window
   * that are free now (L minus those that completed within the last W), the remaining slots go in
   * rounds of L: the first round takes the free slots now, then each slot of the window as it
   * frees (its completion + W); each later round comes W + d after the one before (a slot frees W
   * after its call completes, d after it started). The last slot, number n - 1 (0-based), is in
   * round floor((n - 1) / L) at position (n - 1) mod L of the window's slots, earliest free first;
   * it is done d after it starts. `now` when no rule holds the key back.
   */
  lastDone(now: number, latency: number): number {
    if (this.left <= 0) return now;
    // A cap on calls in flight: waves of that many calls, one latency each.
    let end = Number.isFinite(this.#inFlight) ? now + Math.ceil(this.left / this.cost / this.#inFlight) * latency : now;
    for (const rule of this.#rules) {
      const { windowMs } = rule;
      // Requests of `cost` slots: a window takes whole requests, the rest of its limit goes unused.
      const limit = Math.max(1, Math.floor(rule.limit / this.cost)) * this.cost;
      const last = this.left - 1;
      const position = last % limit;
      const round = Math.floor(last / limit);
      // Slots completed within the window; more than the limit (retries counted late): the latest `limit`.
      const first = this.#firstAfter(now - windowMs);
      const before = first === 0 ? this.#dropped : this.#upTo[first - 1]!;
      const inWindow = this.#total() - before;
      const used = Math.min(limit, inWindow);
      const free = limit - used;
      // Every slot left fits in the free ones: this rule holds nothing back.
      if (round === 0 && position < free) continue;
      let start = now;
      if (position >= free) {
        const slot = before + (inWindow - used) + (position - free) + 1;
        start = Math.max(now, this.#at[this.#entryOf(slot, first)]! + windowMs);
      }
      end = Math.max(end, start + round * (windowMs + latency) + latency);
    }
    return end;
  }

  #total(): number {
    return this.#upTo.length === 0 ? this.#dropped : this.#upTo[this.#upTo.length - 1]!;
  }

  /** First entry (from `#head`) that completed after `time`; `#at.length` for none. */
  #firstAfter(time: number): number {
    let low = this.#head;
    let high = this.#at.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.#at[middle]! > time) high = middle;
      else low = middle + 1;
    }
    return low;
  }

  /** The entry (from `from`) holding slot number `slot` (1-based, over the key's whole log). */
  #entryOf(slot: number, from: number): number {
    let low = from;
    let high = this.#at.length - 1;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.#upTo[middle]! >= slot) high = middle;
      else low = middle + 1;
    }
    return low;
  }
}

/** The rules of each key of a run, from `--rule` as given (`RULE` for every key, `KEY=RULE` for one), as the throttle has them. */
export function rulesOfRun(given: readonly string[]): (key: string) => readonly Rule[] {
  const source = ruleSource(given);
  const parsed = new Map<readonly string[], Rule[]>();
  const parse = (list: readonly string[]): Rule[] => {
    let rules = parsed.get(list);
    if (rules === undefined) parsed.set(list, (rules = list.map((text) => parseRule(text as RuleString))));
    return rules;
  };
  return typeof source === 'function' ? (key) => parse(source(key)) : () => parse(source);
}

/** `0.4 s`, `8 s`, `2 min 5 s`, `1 h 3 min`. */
export function formatSeconds(seconds: number): string {
  if (seconds < 9.95) return `${seconds.toFixed(1)} s`;
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
