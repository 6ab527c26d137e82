import { keyNames, type HashTag } from '../keys.js';
import type { Rule } from '../rules.js';
import type { KeyPart } from '../store.js';
import type { Checks } from './redis-journal.js';
import { CODES } from './redis-scripts.js';

const { op: OP, status: STATUS, check: CHECK } = CODES;

/** What every operation waiting for the next batch has: its key, and who gets the answer. */
interface OpOf<T extends string, A> {
  readonly type: T;
  readonly namespace: string;
  readonly key: string;
  readonly resolve: (answer: A) => void;
  readonly reject: (error: unknown) => void;
  /** Times the batch found the store had lost its data. */
  tries: number;
}

/** A decision: COST slots as soon as every rule of the key (and of `also`) allows, within `maxDelayMs`. */
export interface DecideOp extends OpOf<'decide', Decision> {
  /** Slots per call, the bound on a slot's release, the history kept, the rules. */
  readonly cost: number;
  readonly maxHoldMs: number;
  readonly retainMs: number;
  readonly rules: readonly Rule[];
  /** Book only a slot that starts within this many ms (Infinity: any). */
  readonly maxDelayMs: number;
  /** Number of the call's first member (members are FIRST .. FIRST+COST-1, see `RedisStore`). */
  readonly first: number;
  /** More keys the call counts in (decided with `key` in one step); empty for a call of one key. */
  readonly also: readonly KeyPart[];
  /** A call of one key: this process still waits on the key through calls of several keys (it stays in the key's waiting list). */
  readonly stay: boolean;
}

/** The completions and releases of a key's calls: NUMBER, RELEASE_AT (-1: never started) pairs. */
export interface CompleteOp extends OpOf<'complete', void> {
  readonly pairs: readonly number[];
}

/** This process no longer waits on the key. */
export type LeaveOp = OpOf<'leave', void>;

/** The heartbeat's check of a key's log against this process's journal (a decision's keys are checked too). */
export type CheckOp = OpOf<'check', void>;

/** The key's life shortened to what its slots need (its throttle closes). */
export interface TidyOp extends OpOf<'tidy', void> {
  readonly retainMs: number;
}

/** The end of the key's vendor pause (store clock ms, 0 when none), for a call booked ahead whose start has come. */
export type PausedOp = OpOf<'paused', number>;

/** One operation waiting for the next batch (lua/batch.lua's header describes each). */
export type Op = DecideOp | CompleteOp | LeaveOp | CheckOp | TidyOp | PausedOp;

/** A decision's answer (lua/includes/decide.lua). */
export interface Decision {
  /** `CODES.status`: booked, deferred or refused. */
  readonly status: number;
  readonly waitMs: number;
  readonly startAt: number;
  readonly ruleIndex: number;
  /** The store's clock when it decided. */
  readonly now: number;
  readonly retryMs: number;
}

/** What a batch's checks found. */
export interface Checked {
  /** The decisions not made (status 3): their keys failed a check; asked again once put back. */
  readonly again: DecideOp[];
  /** Keys whose check found this process's calls gone: it puts them back, and holds the key again if that added any. */
  readonly lost: string[];
  /** Keys found held (another process found a loss, or a failover): it puts its calls back too, without holding. */
  readonly held: string[];
  /** With ALIVE (`Alive`): the time of the stamp the batch wrote, -1 when none. */
  readonly stampAt?: number;
  /** With ALIVE's READ: the namespace's stamps as lua/alive.lua 'read' answers them. */
  readonly stamps?: unknown[];
}

/** What a batch asks of the namespace's liveness stamps (lua/batch.lua's ALIVE): an answer at the end of its reply. */
export interface Alive {
  /** The stamp read too. */
  readonly read: boolean;
}

/** A batch's reply, read: each decision's answer (undefined: not made), each check's finding, each pause's end. */
interface Reply {
  readonly decisions: ReadonlyArray<Decision | undefined>;
  readonly checks: readonly number[];
  readonly pauses: readonly number[];
  readonly stampAt?: number;
  readonly stamps?: unknown[];
}

/** One `EVALSHA` of lua/batch.lua: its keys, its arguments after EPOCH, TAG, CHANNEL and GRACE, and who gets which reply. */
export interface EncodedBatch {
  readonly keys: string[];
  /** Every field after EPOCH, TAG, CHANNEL and GRACE, packed as lua/batch.lua's FIELDS. */
  readonly fields: Buffer;
  /** Hands each operation its answer. */
  deliver(reply: unknown): Checked;
  /** The decisions the reply booked (for a reply that came after its callers gave up: lib/stores/redis-store.ts). */
  booked(reply: unknown): DecideOp[];
}

/** Per rules array, its arguments as lua/batch.lua reads a rule set (rules arrays are reused per key). */
const ruleText = new WeakMap<readonly Rule[], string>();

/**
 * Lays out a batch for lua/batch.lua (see its header): the distinct rule sets once, then per key
 * its completions (merged into one), a leave, then its decisions (callers with the same rule set
 * and cost merged into one decide of COUNT calls, in the order they asked), and last the calls of
 * several keys, one each. `deliver` hands each caller its part of the flat reply.
 */
export function encodeBatch(prefix: string, ops: readonly Op[], hashTag: HashTag = 'key', checks?: Checks, alive?: Alive): EncodedBatch {
  const byKey = new Map<string, Op[]>();
  for (const op of ops) {
    const same = byKey.get(op.key);
    if (same) same.push(op);
    else byKey.set(op.key, [op]);
  }
  const keys: string[] = [];
  const indices = new Map<string, number>();
  const sets = new Map<string, number>();
  const setArgs: number[] = [];
  const args: number[] = [];
  // The decisions in the order of their answers, the other operations (answered when the batch is
  // done), and the pause reads in the order of theirs.
  const decided: DecideOp[] = [];
  const others: Array<CompleteOp | LeaveOp | CheckOp | TidyOp> = [];
  const several: DecideOp[] = [];
  const paused: PausedOp[] = [];
  const namespace = ops[0]!.namespace;
  // K of a key: its place among the keys of the batch, 1-based.
  const indexOf = (key: string): number => {
    let k = indices.get(key);
    if (k === undefined) {
      const { log, meta } = keyNames(prefix, namespace, key, hashTag);
      keys.push(log, meta);
      indices.set(key, (k = keys.length / 2));
    }
    return k;
  };
  // SET of a rule set: the distinct (MAX_HOLD, RETAIN, rules) of the batch, 1-based.
  const setOf = (maxHoldMs: number, retainMs: number, rules: readonly Rule[]): number => {
    let text = ruleText.get(rules);
    if (text === undefined) ruleText.set(rules, (text = ruleArgs(rules).join(',')));
    const setId = `${maxHoldMs},${retainMs},${text}`;
    let set = sets.get(setId);
    if (set === undefined) {
      sets.set(setId, (set = sets.size + 1));
      setArgs.push(maxHoldMs, retainMs, ...ruleArgs(rules));
    }
    return set;
  };
  // Keys checked, in the order of their checks.
  const checked: string[] = [];
  const seen = new Set<string>();
  // How a key is checked: its witness looked up at once (CHECK; FULL, meta too), or added by its first booking (WITNESS).
  const check = (key: string, how: 'full' | 'now' | 'booking'): void => {
    if (seen.has(key)) return;
    seen.add(key);
    const witness = checks?.witness(key);
    if (witness === undefined) return;
    const { number, score, keyUntil, deadline } = witness;
    if (how === 'booking') args.push(OP.witness, indexOf(key), number, Math.ceil(score), Math.floor(keyUntil), Math.floor(deadline));
    else args.push(how === 'full' ? OP.checkFull : OP.check, indexOf(key), number, Math.ceil(score), Math.floor(keyUntil));
    checked.push(key);
  };
  // Keys of calls of several keys: checked at once, before any of their keys is booked.
  const shared = new Set<string>();
  for (const op of ops) {
    if (op.type === 'decide' && op.also.length > 0) for (const key of [op.key, ...op.also.map((part) => part.key)]) shared.add(key);
  }
  for (const [key, keyOps] of byKey) {
    const k = indexOf(key);
    const pairs: number[] = [];
    let leave = false;
    let tidy = 0;
    let decides = false;
    // Before anything is decided on the key (a key a process holds nothing on has no witness). A
    // decision reads meta itself; a check without one reads it too (full). A key decided alone is
    // checked by its first booking (no command of its own).
    const groups = new Map<string, DecideOp[]>();
    for (const op of keyOps) {
      switch (op.type) {
        case 'complete':
          for (const value of op.pairs) pairs.push(value);
          others.push(op);
          break;
        case 'leave':
          leave = true;
          others.push(op);
          break;
        case 'check':
          others.push(op);
          break;
        case 'tidy':
          tidy = Math.max(tidy, op.retainMs);
          others.push(op);
          break;
        case 'paused':
          args.push(OP.paused, k);
          paused.push(op);
          break;
        case 'decide': {
          decides = true;
          if (op.also.length > 0) {
            several.push(op);
            break;
          }
          const id = `${op.cost}|${setOf(op.maxHoldMs, op.retainMs, op.rules)}`;
          const same = groups.get(id);
          if (same) same.push(op);
          else groups.set(id, [op]);
        }
      }
    }
    if (checks && (decides || keyOps.some((op) => op.type === 'check'))) check(key, !decides ? 'full' : shared.has(key) ? 'now' : 'booking');
    // Completions first (they may free room), then the leave, then the decisions.
    if (pairs.length > 0) args.push(OP.complete, k, pairs.length / 2, ...pairs);
    if (leave) args.push(OP.leave, k);
    for (const group of groups.values()) {
      const { cost, maxHoldMs, retainMs, rules } = group[0]!;
      // STAY: the process stays in the key's waiting list (see DecideOp.stay).
      args.push(OP.decide, k, setOf(maxHoldMs, retainMs, rules), cost, group.some((op) => op.stay) ? 1 : 0, group.length);
      for (const op of group) {
        args.push(maxDelayArg(op.maxDelayMs), op.first);
        decided.push(op);
      }
    }
    if (tidy > 0) args.push(OP.tidy, k, tidy);
  }
  // Calls of several keys last, after every completion of the batch.
  for (const op of several) {
    const parts = [op, ...op.also];
    for (const part of parts) check(part.key, 'now');
    args.push(OP.decideKeys, parts.length);
    for (const part of parts) args.push(indexOf(part.key), setOf(op.maxHoldMs, part.retainMs, part.rules));
    args.push(op.cost, maxDelayArg(op.maxDelayMs), op.first);
    decided.push(op);
  }
  const read = (reply: unknown): Reply => readReply(reply, decided.length, checked.length, paused.length, alive);
  return {
    keys,
    fields: packNumbers(sets.size, setArgs, args),
    deliver: (raw) => {
      const { decisions, checks: found, pauses, stampAt, stamps } = read(raw);
      const again: DecideOp[] = [];
      // Keys held (a decision not booked for a hold, rule index VT_RULE_RECOVERING): this process
      // puts back its calls there too, if it holds any (a key checked).
      const held = new Set<string>();
      decided.forEach((op, i) => {
        const decision = decisions[i];
        if (decision === undefined) {
          again.push(op);
          return;
        }
        if (decision.status !== STATUS.booked && decision.ruleIndex === CODES.rule.recovering) {
          held.add(op.key);
          for (const part of op.also) held.add(part.key);
        }
        op.resolve(decision);
      });
      for (const op of others) op.resolve();
      const lost: string[] = [];
      const heldKeys: string[] = [];
      checked.forEach((key, i) => {
        if (found[i] === CHECK.lost) lost.push(key);
        else if (found[i] === CHECK.held || held.has(key)) heldKeys.push(key);
      });
      paused.forEach((op, i) => op.resolve(pauses[i]!));
      return { again, lost, held: heldKeys, stampAt, stamps };
    },
    booked: (raw) => {
      // A batch that found the epoch changed did nothing.
      if (Array.isArray(raw) && raw[0] === CODES.batch.epochChanged) return [];
      const { decisions } = read(raw);
      return decided.filter((_, i) => decisions[i]?.status === STATUS.booked);
    },
  };
}

/**
 * The one reader of lua/batch.lua's reply: `{ DONE, NOW_MS, per decision its answer (VT_STATUS_BOOKED_NOW
 * alone, or five values), per check its finding, per pause read its end, with ALIVE the stamp's time
 * and with its READ the stamps }`, checked against what the batch asked for.
 */
function readReply(reply: unknown, decisionCount: number, checkCount: number, pauseCount: number, alive?: Alive): Reply {
  if (!Array.isArray(reply) || reply[0] !== CODES.batch.done) throw new TypeError(`Unexpected reply from lua/batch.lua: ${JSON.stringify(reply)}`);
  let at = 1;
  const next = (): number => {
    const value: unknown = reply[at++];
    if (typeof value !== 'number') throw new TypeError(`Unexpected reply from lua/batch.lua at ${at - 1}: ${JSON.stringify(value)}`);
    return value;
  };
  const now = next();
  const decisions: Array<Decision | undefined> = [];
  for (let i = 0; i < decisionCount; i++) {
    const status = next();
    if (status === STATUS.bookedNow) {
      decisions.push({ status: STATUS.booked, waitMs: 0, startAt: now, ruleIndex: CODES.rule.none, now, retryMs: 0 });
      continue;
    }
    const waitMs = next();
    const startAt = next();
    const ruleIndex = next();
    const retryMs = next();
    decisions.push(status === STATUS.notMade ? undefined : { status, waitMs, startAt, ruleIndex, now, retryMs });
  }
  const checks = Array.from({ length: checkCount }, next);
  const pauses = Array.from({ length: pauseCount }, next);
  const stampAt = alive ? next() : undefined;
  const stamps = alive?.read ? reply.slice(at, (at = reply.length)) : undefined;
  if (at !== reply.length) throw new TypeError(`Unexpected reply from lua/batch.lua: ${reply.length} values where ${at} were expected`);
  return { decisions, checks, pauses, stampAt, stamps };
}

/** MAX_DELAY as lua/includes/decide.lua reads it: whole ms, or -1 for any. */
function maxDelayArg(maxDelayMs: number): number {
  return Number.isFinite(maxDelayMs) ? Math.floor(maxDelayMs) : -1;
}

/**
 * `first`, then `...lists`, as one MessagePack array of numbers, which lua/batch.lua unpacks with
 * Redis's `cmsgpack` (in C: measured 4.5 µs of Redis CPU less per call than splitting a text).
 * Integers of 0 to 127 take one byte, other 32-bit ones five; the rest (times in ms, fractions) go
 * as doubles, nine bytes, exact for integers below 2^53.
 */
export function packNumbers(first: number, ...lists: ReadonlyArray<readonly number[]>): Buffer {
  let count = 1;
  let size = 5 + byteLength(first);
  // Indexed loops: an iterator would box every double it hands out.
  for (let l = 0; l < lists.length; l++) {
    const list = lists[l]!;
    count += list.length;
    for (let i = 0; i < list.length; i++) size += byteLength(list[i]!);
  }
  const out = Buffer.allocUnsafe(size);
  out[0] = 0xdd;
  out.writeUInt32BE(count, 1);
  let at = writeNumber(out, 5, first);
  for (let l = 0; l < lists.length; l++) {
    const list = lists[l]!;
    for (let i = 0; i < list.length; i++) at = writeNumber(out, at, list[i]!);
  }
  return out;
}

function byteLength(value: number): number {
  if (value >= 0 && value < 128 && Number.isInteger(value)) return 1;
  return value >= -(2 ** 31) && value < 2 ** 31 && Number.isInteger(value) ? 5 : 9;
}

function writeNumber(out: Buffer, at: number, value: number): number {
  const length = byteLength(value);
  if (length === 1) {
    out[at] = value;
  } else if (length === 5) {
    out[at] = 0xd2;
    out.writeInt32BE(value, at + 1);
  } else {
    out[at] = 0xcb;
    out.writeDoubleBE(value, at + 1);
  }
  return at + length;
}

/** Rules as lua/includes/buckets.lua reads them: R, then R triples LIMIT, WINDOW, BUCKET. */
export function ruleArgs(rules: readonly Rule[]): number[] {
  const args = [rules.length];
  for (const { limit, windowMs, bucketMs } of rules) args.push(limit, windowMs, bucketMs ?? 0);
  return args;
}
