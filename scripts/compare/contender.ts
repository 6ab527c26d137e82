/**
 * What every limiter in the side-by-side benchmark looks like to a worker process: wait for a slot
 * for a user, then run the call. One file per contender (`contender-*.ts`) builds it the way that
 * library's own docs recommend for "at most N calls per window per user, across processes".
 */
import type { Redis } from 'ioredis';

/** At most `limit` calls in any `windowMs`, per user. */
export interface Rule {
  readonly limit: number;
  readonly windowMs: number;
}

/** One limiter instance living in one worker process for one run. */
export interface Limiter {
  /** Waits until `fn` may start for `user`, starts it, and settles with it. */
  schedule(user: string, fn: () => Promise<void>): Promise<void>;
  /** Stops timers and lets go of what the limiter holds. The Redis clients are closed by {@link LimiterContext}. */
  close(): Promise<void>;
}

/** What a contender gets to build its limiter in one worker. */
export interface LimiterContext {
  /** Unique per run: prefix of every Redis key and pub/sub channel, so runs never share state. */
  readonly runId: string;
  readonly rules: readonly Rule[];
  /** Worker processes sharing the limits (p-queue divides the limits by it). */
  readonly workers: number;
  /** A connected ioredis client whose commands are counted; closed after the run. */
  connect(options?: { enableAutoPipelining?: boolean }): Promise<Redis>;
}

export interface Contender {
  /** Short id used on the command line (`--contenders=`). */
  readonly id: ContenderId;
  /** Name in tables and charts. */
  readonly label: string;
  /** How it is configured for these rules: one line for the report. */
  describe(rules: readonly Rule[], workers: number): string;
  create(context: LimiterContext): Promise<Limiter>;
}

export const CONTENDER_IDS = ['vendor-throttle', 'bottleneck-reservoir', 'bottleneck-mintime', 'rlf', 'p-queue', 'zset'] as const;
export type ContenderId = (typeof CONTENDER_IDS)[number];

/** `20/1s`, `15/5s`, `5/250ms`, `5000/day`: rules as the report prints them. */
export function ruleLabel(rule: Rule): string {
  if (rule.windowMs === 86_400_000) return `${rule.limit}/day`;
  return rule.windowMs % 1000 === 0 ? `${rule.limit}/${rule.windowMs / 1000}s` : `${rule.limit}/${rule.windowMs}ms`;
}

/** Rules ordered from the longest window to the shortest (the order chained limiters take them in). */
export function longestFirst(rules: readonly Rule[]): Rule[] {
  return [...rules].sort((a, b) => b.windowMs - a.windowMs);
}
