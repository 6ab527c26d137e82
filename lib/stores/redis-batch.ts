import { keyNames } from '../keys.js';
import type { Rule } from '../rules.js';

/** A decision waiting for the next batch (see lua/includes/decide.lua for the arguments). */
export interface DecideOp {
  readonly type: 'd';
  readonly namespace: string;
  readonly key: string;
  readonly cost: number;
  readonly maxHoldMs: number;
  readonly retainMs: number;
  readonly rules: readonly Rule[];
  readonly maxDelayMs: number;
  /** Number of the call's first member (see `RedisStore`). */
  readonly first: number;
}

/** Completions and releases of one key waiting for the next batch (see lua/includes/complete.lua). */
export interface CompleteOp {
  readonly type: 'c';
  readonly namespace: string;
  readonly key: string;
  /** MEMBER, RELEASE_AT ('' = remove) pairs. */
  readonly pairs: ReadonlyArray<string | number>;
}

/** This process no longer waits for a completion on the key (its waiting calls went away). */
export interface LeaveOp {
  readonly type: 'l';
  readonly namespace: string;
  readonly key: string;
}

export type Op = (DecideOp | CompleteOp | LeaveOp) & {
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
  /** Times the batch found the store had lost its data. */
  tries: number;
};

/** One `EVALSHA` of lua/batch.lua: its keys, its arguments after EPOCH, TAG and CHANNEL, and who gets which reply. */
export interface EncodedBatch {
  readonly keys: string[];
  readonly args: Array<string | number>;
  deliver(reply: readonly unknown[]): void;
}

/**
 * Lays out a batch for lua/batch.lua: per key, completions first (merged into one), then a leave,
 * then the decisions (callers with the same cost, bound, history and rules merged into one decide of COUNT
 * calls, in the order they asked). `deliver` hands each caller its part of the reply.
 */
export function encodeBatch(prefix: string, ops: readonly Op[]): EncodedBatch {
  const keys: string[] = [];
  const groups = new Map<string, Map<string, Op[]>>();
  for (const op of ops) {
    let byKey = groups.get(op.key);
    if (!byKey) groups.set(op.key, (byKey = new Map()));
    const id = op.type === 'd' ? `d${op.cost},${op.maxHoldMs},${op.retainMs}|${ruleArgs(op.rules).join(',')}` : op.type;
    const same = byKey.get(id);
    if (same) same.push(op);
    else byKey.set(id, [op]);
  }
  const args: Array<string | number> = [];
  const receivers: Array<(reply: unknown) => void> = [];
  for (const [key, byKey] of groups) {
    const { log, meta } = keyNames(prefix, ops[0]!.namespace, key);
    keys.push(log, meta);
    const k = keys.length / 2;
    const ordered = [...byKey.values()].sort((a, b) => ORDER[a[0]!.type] - ORDER[b[0]!.type]);
    for (const merged of ordered) {
      const first = merged[0]!;
      if (first.type === 'c') {
        const pairs = merged.flatMap((op) => (op as CompleteOp).pairs);
        args.push('c', k, key, pairs.length / 2, ...pairs);
        receivers.push((reply) => merged.forEach((op) => op.resolve(reply)));
      } else if (first.type === 'l') {
        args.push('l', k, key);
        receivers.push((reply) => merged.forEach((op) => op.resolve(reply)));
      } else {
        const calls = merged.flatMap((op) => {
          const { maxDelayMs, first: number } = op as DecideOp;
          return [Number.isFinite(maxDelayMs) ? Math.floor(maxDelayMs) : 'inf', number];
        });
        args.push('d', k, key, first.cost, first.maxHoldMs, first.retainMs, merged.length, ...calls, ...ruleArgs(first.rules));
        receivers.push((reply) => merged.forEach((op, i) => op.resolve((reply as unknown[])[i])));
      }
    }
  }
  return {
    keys,
    args: [receivers.length, ...args],
    deliver: (reply) => receivers.forEach((receive, i) => receive(reply[i + 1])),
  };
}

/** Per key: completions first (they may free room), then a leave, then decisions. */
const ORDER = { c: 0, l: 1, d: 2 } as const;

/** Rules as lua/includes/buckets.lua reads them: R, then R triples LIMIT, WINDOW, BUCKET. */
export function ruleArgs(rules: readonly Rule[]): number[] {
  const args = [rules.length];
  for (const { limit, windowMs, bucketMs } of rules) args.push(limit, windowMs, bucketMs ?? 0);
  return args;
}
