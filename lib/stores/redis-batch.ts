import type { Checks } from '../journal.js';
import type { KeyNameParts } from '../keys.js';
import type { Rule } from '../rules.js';
import type { KeyPart } from '../store.js';
import { CODES, unexpected } from './redis-scripts.js';
import { bulkLength, packNumbers, textLength, writeBulkHeader, writeBytes, writeCrlf, writeText, type ScriptKeys } from './resp.js';

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
  /** A reservation's grace (`ReserveRequest.reserved`, `graceMs`): never deferred (its set's RESERVED); -1 for a call. */
  readonly graceMs: number;
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
  /** A reservation booked with dependencies: them, as lua/includes/decide.lua's vt_deps lists them. */
  readonly deps?: string;
}

/** What a batch's checks found. */
export interface Checked {
  /** The decisions not made (status 3): their keys failed a check; asked again once put back. */
  readonly again: DecideOp[];
  /** Keys whose check found this process's calls gone: it puts them back, and holds the key again if that added any. */
  readonly lost: string[];
  /** Keys found held (another process found a loss, or a failover): it puts its calls back too, without holding. */
  readonly held: string[];
  /** With EVICTED: `evicted_keys` of INFO stats, -1 where INFO is denied to the script. */
  readonly evictedKeys?: number;
  /** With ALIVE (`Alive`): the time of the stamp the batch wrote, -1 when none. */
  readonly stampAt?: number;
  /** With ALIVE's READ: the namespace's stamps as lua/alive.lua 'read' answers them. */
  readonly stamps?: unknown[];
  /** The epoch sent was in place (false: a batch of checks alone went on past a changed one, SOFT). */
  readonly epochInPlace: boolean;
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
  readonly evictedKeys?: number;
  readonly stampAt?: number;
  readonly stamps?: unknown[];
  /** DONE (not DONE_UNDER_CHANGED_EPOCH). */
  readonly epochInPlace: boolean;
}

/** One `EVALSHA` of lua/batch.lua: its keys, its arguments after EPOCH, TAG, CHANNEL and GRACE, and who gets which reply. */
export interface EncodedBatch {
  /** The user keys of the batch (K order): each is two Redis keys, its log and meta (`batchKeys`). */
  readonly users: string[];
  /** Every field after EPOCH, TAG, CHANNEL and GRACE, packed as lua/batch.lua's FIELDS. */
  readonly fields: Buffer;
  /** Hands each operation its answer. */
  deliver(reply: unknown): Checked;
  /** The decisions the reply booked (for a reply that came after its callers gave up: lib/stores/redis-store.ts). */
  booked(reply: unknown): DecideOp[];
}

/** Per rules array, its arguments as lua/batch.lua reads a rule set (rules arrays are reused per key). */
const ruleText = new WeakMap<readonly Rule[], string>();

/** A distinct rule set of a batch: its SET is its place among them, 1-based. */
interface RuleSet {
  readonly maxHoldMs: number;
  readonly graceMs: number;
  readonly retainMs: number;
  /** Its rules' arguments, joined: two rules arrays alike are one set. */
  readonly text: string;
}

/**
 * The fields of the batch being laid out after its rule sets, and the SET of each decision of the
 * key being laid out: reused from batch to batch (a batch is laid out and packed in one go).
 */
const fields: number[] = [];
/**
 * Where in `fields` a value goes as text, ascending: a member's number, a witness's score, a
 * completion's time (`pushText`).
 */
const textAt: number[] = [];
const setOfOp: number[] = [];

/**
 * Lays out a batch for lua/batch.lua (see its header): the distinct rule sets once, then per key
 * its completions (merged into one), a leave, then its decisions (callers with the same rule set
 * and cost merged into one decide of COUNT calls, in the order they asked), and last the calls of
 * several keys, one each. `groups`: the operations of each key, in the order asked, one group per
 * key (`groupByKey`). `deliver` hands each caller its part of the flat reply.
 */
export function encodeBatch(groups: ReadonlyArray<readonly Op[]>, checks?: Checks, alive?: Alive, evicted = false): EncodedBatch {
  const users: string[] = [];
  const sets: RuleSet[] = [];
  const setArgs: number[] = [];
  let length = 0;
  const push = (value: number): void => {
    fields[length++] = value;
  };
  let texts = 0;
  // A value lua/batch.lua only hands to Redis (a member's number, a score, a time) goes as its
  // digits when it is a whole number >= 0 (the usual), any other as a number: Redis would format a
  // Lua number (%.17g) on each use, which cost more than the rest of a call's Lua.
  const pushText = (value: number): void => {
    if (value >= 0 && Number.isSafeInteger(value)) textAt[texts++] = length;
    fields[length++] = value;
  };
  // The decisions in the order of their answers, the other operations (answered when the batch is
  // done), and the pause reads in the order of theirs.
  const decided: DecideOp[] = [];
  const others: Array<CompleteOp | LeaveOp | CheckOp | TidyOp> = [];
  const several: DecideOp[] = [];
  const paused: PausedOp[] = [];
  // SET of a rule set: the distinct (MAX_HOLD, RETAIN, RESERVED, rules) of the batch, 1-based.
  const setOf = (maxHoldMs: number, retainMs: number, rules: readonly Rule[], graceMs = -1): number => {
    let text = ruleText.get(rules);
    if (text === undefined) ruleText.set(rules, (text = ruleArgs(rules).join(',')));
    for (let s = 0; s < sets.length; s++) {
      const set = sets[s]!;
      if (set.maxHoldMs === maxHoldMs && set.retainMs === retainMs && set.graceMs === graceMs && set.text === text) return s + 1;
    }
    sets.push({ maxHoldMs, retainMs, graceMs, text });
    for (const value of [maxHoldMs, retainMs, graceMs, ...ruleArgs(rules)]) setArgs.push(value);
    return sets.length;
  };
  // K of a key: its place among the keys of the batch, 1-based (a key of a group: its group's).
  let indices: Map<string, number> | undefined;
  const indexOf = (key: string): number => {
    if (indices === undefined) {
      indices = new Map();
      for (let i = 0; i < users.length; i++) indices.set(users[i]!, i + 1);
    }
    let k = indices.get(key);
    if (k === undefined) {
      users.push(key);
      indices.set(key, (k = users.length));
    }
    return k;
  };
  // Keys checked, in the order of their checks.
  const checked: string[] = [];
  // How a key is checked: its witness looked up at once (CHECK; FULL, meta too), or added by its first booking (WITNESS).
  const check = (key: string, how: 'full' | 'now' | 'booking', k?: number): void => {
    const witness = checks?.witness(key);
    if (witness === undefined) return;
    const { number, score, keyUntil, deadline } = witness;
    push(how === 'booking' ? OP.witness : how === 'full' ? OP.checkFull : OP.check);
    push(k ?? indexOf(key));
    pushText(number);
    pushText(Math.ceil(score));
    push(Math.floor(keyUntil));
    if (how === 'booking') push(Math.floor(deadline));
    checked.push(key);
  };
  // Keys of calls of several keys: checked at once, before any of their keys is booked, and once.
  let shared: Set<string> | undefined;
  for (const group of groups) {
    for (const op of group) {
      if (op.type !== 'decide' || op.also.length === 0) continue;
      shared ??= new Set();
      shared.add(op.key);
      for (const part of op.also) shared.add(part.key);
    }
  }
  const seen = new Set<string>();
  for (const group of groups) {
    const key = group[0]!.key;
    users.push(key);
    const k = users.length;
    let pairs = 0;
    let leave = false;
    let tidy = 0;
    let decides = false;
    let checkOp = false;
    let single = 0;
    for (const op of group) {
      switch (op.type) {
        case 'complete':
          pairs += op.pairs.length;
          others.push(op);
          break;
        case 'leave':
          leave = true;
          others.push(op);
          break;
        case 'check':
          checkOp = true;
          others.push(op);
          break;
        case 'tidy':
          tidy = Math.max(tidy, op.retainMs);
          others.push(op);
          break;
        case 'paused':
          push(OP.paused);
          push(k);
          paused.push(op);
          break;
        case 'decide':
          decides = true;
          if (op.also.length > 0) several.push(op);
          else setOfOp[single++] = setOf(op.maxHoldMs, op.retainMs, op.rules, op.graceMs);
      }
    }
    // Before anything is decided on the key (a key a process holds nothing on has no witness). A
    // decision reads meta itself; a check without one reads it too (full). A key decided alone is
    // checked by its first booking (no command of its own).
    if (checks && (decides || checkOp)) {
      const now = shared?.has(key) === true;
      if (now) seen.add(key);
      check(key, !decides ? 'full' : now ? 'now' : 'booking', k);
    }
    // Completions first (they may free room), then the leave, then the decisions.
    if (pairs > 0) {
      push(OP.complete);
      push(k);
      push(pairs / 2);
      for (const op of group) if (op.type === 'complete') for (const value of op.pairs) pushText(value);
    }
    if (leave) {
      push(OP.leave);
      push(k);
    }
    if (single > 0) decideGroups(group, k, single, push, pushText, decided);
    if (tidy > 0) {
      push(OP.tidy);
      push(k);
      push(tidy);
    }
  }
  // Calls of several keys last, after every completion of the batch.
  if (several.length > 0) {
    for (const op of several) {
      const parts = [op, ...op.also];
      for (const { key } of parts) {
        if (seen.has(key)) continue;
        seen.add(key);
        check(key, 'now');
      }
      push(OP.decideKeys);
      push(parts.length);
      for (const part of parts) {
        push(indexOf(part.key));
        push(setOf(op.maxHoldMs, part.retainMs, part.rules, op.graceMs));
      }
      push(op.cost);
      push(maxDelayArg(op.maxDelayMs));
      pushText(op.first);
      decided.push(op);
    }
  }
  const packed = packNumbers(sets.length, setArgs, fields, length, textAt, texts);
  const read = (reply: unknown): Reply => readReply(reply, decided.length, checked.length, paused.length, evicted, alive);
  return {
    users,
    fields: packed,
    deliver: (raw) => {
      const { decisions, checks: found, pauses, evictedKeys, stampAt, stamps, epochInPlace } = read(raw);
      const again: DecideOp[] = [];
      // Keys held (a decision not booked for a hold, rule index VT_RULE_RECOVERING): this process
      // puts back its calls there too, if it holds any (a key checked).
      let held: Set<string> | undefined;
      for (let i = 0; i < decided.length; i++) {
        const op = decided[i]!;
        const decision = decisions[i];
        if (decision === undefined) {
          again.push(op);
          continue;
        }
        if (decision.status !== STATUS.booked && decision.ruleIndex === CODES.rule.recovering) {
          held ??= new Set();
          held.add(op.key);
          for (const part of op.also) held.add(part.key);
        }
        op.resolve(decision);
      }
      for (const op of others) op.resolve();
      const lost: string[] = [];
      const heldKeys: string[] = [];
      for (let i = 0; i < checked.length; i++) {
        const key = checked[i]!;
        if (found[i] === CHECK.lost) lost.push(key);
        else if (found[i] === CHECK.held || held?.has(key) === true) heldKeys.push(key);
      }
      for (let i = 0; i < paused.length; i++) paused[i]!.resolve(pauses[i]!);
      return { again, lost, held: heldKeys, evictedKeys, stampAt, stamps, epochInPlace };
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
 * The decisions of one key's calls of that key alone (`single` of them, their SETs in `setOfOp`):
 * one decide per rule set and cost, in the order of each one's first call, its calls in the order
 * they asked.
 */
function decideGroups(
  group: readonly Op[],
  k: number,
  single: number,
  push: (value: number) => void,
  pushText: (value: number) => void,
  decided: DecideOp[],
): void {
  if (single === 1) {
    for (const op of group) {
      if (op.type !== 'decide' || op.also.length > 0) continue;
      push(OP.decide);
      push(k);
      push(setOfOp[0]!);
      push(op.cost);
      push(op.stay ? 1 : 0);
      push(1);
      push(maxDelayArg(op.maxDelayMs));
      pushText(op.first);
      decided.push(op);
    }
    return;
  }
  const ops: DecideOp[] = [];
  for (const op of group) if (op.type === 'decide' && op.also.length === 0) ops.push(op);
  for (let i = 0; i < single; i++) {
    const { cost } = ops[i]!;
    const set = setOfOp[i]!;
    // A call whose group came first was laid out with it.
    let before = false;
    for (let j = 0; j < i && !before; j++) before = setOfOp[j] === set && ops[j]!.cost === cost;
    if (before) continue;
    let count = 0;
    let stay = false;
    for (let j = i; j < single; j++) {
      if (setOfOp[j] !== set || ops[j]!.cost !== cost) continue;
      count += 1;
      // STAY: the process stays in the key's waiting list (see DecideOp.stay).
      stay ||= ops[j]!.stay;
    }
    push(OP.decide);
    push(k);
    push(set);
    push(cost);
    push(stay ? 1 : 0);
    push(count);
    for (let j = i; j < single; j++) {
      const op = ops[j]!;
      if (setOfOp[j] !== set || op.cost !== cost) continue;
      push(maxDelayArg(op.maxDelayMs));
      pushText(op.first);
      decided.push(op);
    }
  }
}

/** Operations by key, each key's in the order asked, the keys in the order of their first operation. */
export function groupByKey(ops: readonly Op[]): Op[][] {
  const byKey = new Map<string, Op[]>();
  for (const op of ops) {
    const same = byKey.get(op.key);
    if (same) same.push(op);
    else byKey.set(op.key, [op]);
  }
  return [...byKey.values()];
}

/**
 * A batch's Redis keys (lua/batch.lua's KEYS): each user key's log and meta, named from `parts`
 * (lib/keys.ts, keyNames), then `extra`.
 */
export function batchKeys(parts: KeyNameParts, users: readonly string[], extra: readonly string[]): ScriptKeys {
  const { head, log, meta } = parts;
  return {
    count: 2 * users.length + extra.length,
    list: () => {
      const keys: string[] = [];
      for (const user of users) keys.push(`${head}${user}${log}`, `${head}${user}${meta}`);
      for (const key of extra) keys.push(key);
      return keys;
    },
    byteLength: () => {
      const logLength = Buffer.byteLength(head) + Buffer.byteLength(log);
      const metaLength = Buffer.byteLength(head) + Buffer.byteLength(meta);
      let size = 0;
      for (const user of users) {
        const length = textLength(user);
        size += bulkLength(logLength + length) + bulkLength(metaLength + length);
      }
      for (const key of extra) size += bulkLength(Buffer.byteLength(key));
      return size;
    },
    write: (out, at) => {
      const headBytes = Buffer.from(head);
      const logBytes = Buffer.from(log);
      const metaBytes = Buffer.from(meta);
      for (const user of users) {
        const length = textLength(user);
        at = writeName(out, at, length, headBytes, user, logBytes);
        at = writeName(out, at, length, headBytes, user, metaBytes);
      }
      for (const key of extra) {
        const bytes = Buffer.from(key);
        at = writeBulkHeader(out, at, bytes.length);
        at = writeCrlf(out, writeBytes(out, at, bytes));
      }
      return at;
    },
  };
}

/** `head + user + tail` as a RESP bulk string (`userLength`: the user key's bytes). */
function writeName(out: Buffer, at: number, userLength: number, head: Uint8Array, user: string, tail: Uint8Array): number {
  at = writeBulkHeader(out, at, head.length + userLength + tail.length);
  at = writeBytes(out, at, head);
  at = writeText(out, at, user);
  return writeCrlf(out, writeBytes(out, at, tail));
}

/**
 * The one reader of lua/batch.lua's reply: `{ DONE, NOW_MS, per decision its answer (VT_STATUS_BOOKED_NOW
 * alone, five values, or six: VT_STATUS_BOOKED_DEPS's), per check its finding, per pause read its end, with EVICTED the count of
 * evicted keys, with ALIVE the stamp's time and with its READ the stamps }`, checked against what the
 * batch asked for.
 */
function readReply(reply: unknown, decisionCount: number, checkCount: number, pauseCount: number, evicted: boolean, alive?: Alive): Reply {
  if (!Array.isArray(reply) || (reply[0] !== CODES.batch.done && reply[0] !== CODES.batch.doneUnderChangedEpoch)) return unexpected('batch', reply);
  let at = 1;
  const next = (): number => {
    const value: unknown = reply[at++];
    if (typeof value !== 'number') return unexpected('batch', reply);
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
    if (status === STATUS.bookedDeps) {
      const deps: unknown = reply[at++];
      if (typeof deps !== 'string' && !Buffer.isBuffer(deps)) return unexpected('batch', reply);
      decisions.push({ status: STATUS.booked, waitMs, startAt, ruleIndex, now, retryMs, deps: deps.toString() });
      continue;
    }
    decisions.push(status === STATUS.notMade ? undefined : { status, waitMs, startAt, ruleIndex, now, retryMs });
  }
  const checks = Array.from({ length: checkCount }, next);
  const pauses = Array.from({ length: pauseCount }, next);
  const evictedKeys = evicted ? next() : undefined;
  const stampAt = alive ? next() : undefined;
  const stamps = alive?.read ? reply.slice(at, (at = reply.length)) : undefined;
  if (at !== reply.length) unexpected('batch', reply);
  return { decisions, checks, pauses, evictedKeys, stampAt, stamps, epochInPlace: reply[0] === CODES.batch.done };
}

/** MAX_DELAY as lua/includes/decide.lua reads it: whole ms, or -1 for any. */
function maxDelayArg(maxDelayMs: number): number {
  return Number.isFinite(maxDelayMs) ? Math.floor(maxDelayMs) : -1;
}

/** Rules as lua/includes/buckets.lua reads them: R, then R triples LIMIT, WINDOW, BUCKET. */
export function ruleArgs(rules: readonly Rule[]): number[] {
  const args = [rules.length];
  for (const { limit, windowMs, bucketMs } of rules) args.push(limit, windowMs, bucketMs ?? 0);
  return args;
}
