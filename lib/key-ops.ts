import { CallLife, type LifeEvents } from './call-life.js';
import { limitedError, oneKey, prepareCall, type CallDefaults } from './calls.js';
import { checkDelay, checkKnown } from './validate.js';
import { storeError } from './store-client.js';
import { ThrottleConfigError } from './errors.js';
import type { KeyInput } from './keys.js';
import type { KeyUsage, LimitOptions, LimitResult, ThrottleEvents } from './options.js';
import { describe, MAX_WINDOW_MS } from './rules.js';
import { grantOf, type Slots } from './completions.js';
import { withRemaining, type Store } from './store.js';
import { lessonsOf, type LearnEntry } from './learning.js';
import { readPublishedLimits, readVendorSignal, type HeaderSource } from './vendor-signals.js';
import type { Lines } from './waiting.js';

/** What the operations on one key need of their throttle. */
export interface KeyOpsContext {
  readonly name: string;
  readonly store: Store;
  readonly callDefaults: CallDefaults;
  readonly maxHoldMs: number;
  /** How long a learned limit holds unless said again. */
  readonly learnedForMs: number;
  /** A published limit applies above the configured rule of its window. */
  readonly learnAboveRules: boolean;
  /** The fewest calls per window of the shortest rule that refusals teach. */
  readonly learnedFloor: number;
  readonly closing: AbortSignal;
  /** The throttle's lines: `limit()` asks the store through them, as a call does. */
  readonly lines: Lines;
  readonly slots: Slots;
  /** Calls of this process waiting for the (encoded) key: sleeping until their slot, or in line. */
  waitingHere(encoded: string): number;
  /** Room came on the (encoded) key: this process's refusals there are forgotten and its waiting calls ask again. */
  freed(encoded: string): void;
  notify<E extends keyof ThrottleEvents>(event: E, ...args: ThrottleEvents[E]): void;
  /** The throttle's events, for the life of a call `limit()` books. */
  readonly events: LifeEvents;
}

/** Keys whose last lesson this process remembers (see `KeyOps.learn`): the oldest go past it. */
const TAUGHT_KEYS = 10_000;
/**
 * The same lesson is sent to the store again after this long at most (ms), or a quarter of
 * `learnedForMs` if shorter: a store that lost the key's data learns it again within that.
 */
const TEACH_AGAIN_MS = 30_000;

/** Sets `key` in a map kept to the TAUGHT_KEYS most recent keys. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > TAUGHT_KEYS) map.delete(map.keys().next().value!);
}

/** The names `limit()` takes. */
const LIMIT_OPTIONS = ['cost'] as const satisfies ReadonlyArray<keyof LimitOptions>;

/** The throttle's operations on one key besides `schedule()`: `inspect`, `pause`, `reset`, `limit` and `shortestWindow`. */
export class KeyOps {
  readonly #c: KeyOpsContext;
  /** Per encoded key, the last lesson this process sent to the store and when: the same lesson is not sent again for a while (TEACH_AGAIN_MS). */
  readonly #taught = new Map<string, { readonly lesson: string; readonly at: number }>();
  /** Per encoded key that learned a limit from refusals, as this process last saw it: when it last changed (local time), so that a probe goes up a window after. */
  readonly #probes = new Map<string, number>();
  /** Per encoded key, when this process last sent what the vendor says remains (a hold): at most once a fifth of the window. */
  readonly #holds = new Map<string, number>();

  constructor(context: KeyOpsContext) {
    this.#c = context;
  }

  async inspect(key: KeyInput): Promise<KeyUsage> {
    const call = await prepareCall(this.#c.callDefaults, oneKey('inspect', key), {});
    let usage;
    try {
      usage = await this.#c.store.inspect(this.#c.name, call.encoded, call.rules, this.#c.maxHoldMs);
    } catch (error) {
      throw storeError(error);
    }
    const { bookedAhead = 0, nextFreeInMs, pausedForMs, stored = true, learned = [] } = usage;
    return {
      key: call.key,
      rules: withRemaining(usage),
      bookedAhead,
      nextFreeInMs,
      pausedForMs,
      stored,
      learned,
      waitingHere: this.#c.waitingHere(call.encoded),
    };
  }

  async learn(key: KeyInput, response: { readonly status: number; readonly headers: HeaderSource; readonly flagged?: boolean }): Promise<void> {
    const call = await prepareCall(this.#c.callDefaults, oneKey('learn', key), {});
    if (response === null || typeof response !== 'object' || response.headers === null || typeof response.headers !== 'object') {
      throw new ThrottleConfigError(`Expected learn() response to be an object with headers, got ${describe(response)}`, 'response');
    }
    const { status, flagged } = response;
    if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599) {
      throw new ThrottleConfigError(`Expected learn() response.status to be an HTTP status, a whole number from 100 to 599, got ${describe(status)}`, 'status');
    }
    if (flagged !== undefined && typeof flagged !== 'boolean') {
      throw new ThrottleConfigError(`Expected learn() response.flagged to be true or false, got ${describe(flagged)}`, 'flagged');
    }
    const { store, learnedForMs, learnAboveRules, learnedFloor } = this.#c;
    if (store.learn === undefined) return;
    const report = (message: string): void => this.#c.notify('debug', { message: `learn(): ${message}`, key: call.key });
    const published = lessonsOf(
      readPublishedLimits(response.headers, report),
      call.rules,
      call.retainMs,
      { lapseMs: learnedForMs, aboveRules: learnAboveRules },
      report,
    );
    const now = performance.now();
    const sets = published.filter((entry) => entry.mode !== 'hold');
    const holds = published.filter((entry) => entry.mode === 'hold');
    const lessons: LearnEntry[] = [];
    if (sets.length > 0) {
      // The same published limits are not sent again for a while.
      const lesson = sets.map((entry) => `${entry.source}:${entry.windowMs}:${entry.limit}`).join(',');
      const last = this.#taught.get(call.encoded);
      if (last === undefined || last.lesson !== lesson || now - last.at >= Math.min(learnedForMs / 4, TEACH_AGAIN_MS)) {
        lessons.push(...sets);
        remember(this.#taught, call.encoded, { lesson, at: now });
      }
    }
    const heldAt = this.#holds.get(call.encoded);
    if (holds.length > 0 && (heldAt === undefined || now - heldAt >= Math.min(...holds.map((entry) => entry.windowMs)) / 5)) {
      lessons.push(...holds);
      remember(this.#holds, call.encoded, now);
    }
    // Refusals teach the key's shortest rule, unless a published limit lowers it: a vendor that
    // publishes nothing, or its configured limit while refusing (other calls count on the account).
    const shortest = call.rules.filter((rule) => rule.windowMs > 0).sort((a, b) => a.windowMs - b.windowMs)[0];
    if (shortest !== undefined && !sets.some((entry) => entry.windowMs === shortest.windowMs && entry.limit > 0)) {
      const { refused } = readVendorSignal({ status: response.status, headers: response.headers, flagged: response.flagged === true });
      const probedAt = this.#probes.get(call.encoded);
      const entry = { source: 'refusals' as const, limit: shortest.limit, windowMs: shortest.windowMs, lapseMs: learnedForMs };
      if (refused) lessons.push({ ...entry, mode: 'down', floor: learnedFloor });
      else if (probedAt !== undefined && now - probedAt >= shortest.windowMs) lessons.push({ ...entry, mode: 'up' });
    }
    if (lessons.length === 0) return;
    let result;
    try {
      result = await store.learn(this.#c.name, call.encoded, lessons, this.#c.maxHoldMs);
    } catch (error) {
      this.#taught.delete(call.encoded);
      throw storeError(error);
    }
    if (result.learned.some((entry) => entry.source === 'refusals')) {
      // A probe goes up a window after the last change, or the last probe (another process's may have gone up meanwhile).
      if (result.changed || lessons.some((entry) => entry.mode === 'up') || !this.#probes.has(call.encoded)) remember(this.#probes, call.encoded, now);
    } else {
      this.#probes.delete(call.encoded);
    }
    if (result.changed) this.#c.notify('learned', { key: call.key, learned: result.learned });
  }

  async pause(key: KeyInput, ms: number, source: string): Promise<void> {
    const call = await prepareCall(this.#c.callDefaults, oneKey('pause', key), {});
    checkDelay('pause ms', ms);
    if (ms > MAX_WINDOW_MS) throw new ThrottleConfigError(`Expected pause ms to be at most ${MAX_WINDOW_MS} (366 days), got ${ms}`, 'ms');
    try {
      await this.#c.store.pause(this.#c.name, call.encoded, ms, this.#c.maxHoldMs);
    } catch (error) {
      throw storeError(error);
    }
    this.#c.notify('paused', { key: call.key, ms, source });
  }

  async shortestWindow(key: KeyInput): Promise<number> {
    const call = await prepareCall(this.#c.callDefaults, oneKey('shortestWindow', key), {});
    const windows = call.rules.map((rule) => rule.windowMs).filter((windowMs) => windowMs > 0);
    return windows.length === 0 ? 0 : Math.min(...windows);
  }

  async reset(key: KeyInput): Promise<void> {
    const call = await prepareCall(this.#c.callDefaults, oneKey('reset', key), {});
    const { store } = this.#c;
    if (store.reset === undefined) throw new ThrottleConfigError('Expected a store that can reset a key (Store.reset), got one without it', 'store');
    // What it learned goes too: the next lesson is sent at once.
    this.#taught.delete(call.encoded);
    this.#probes.delete(call.encoded);
    this.#holds.delete(call.encoded);
    try {
      await store.reset(this.#c.name, call.encoded, call.retainMs, this.#c.maxHoldMs);
    } catch (error) {
      throw storeError(error);
    }
    this.#c.freed(call.encoded);
  }

  async limit(key: KeyInput, options: LimitOptions = {}): Promise<LimitResult> {
    if (options === null || typeof options !== 'object')
      throw new ThrottleConfigError(`Expected limit options to be an object, got ${describe(options)}`, 'options');
    checkKnown('limit', options, LIMIT_OPTIONS);
    // Now or never, as a call in 'throw' mode.
    const call = await prepareCall({ ...this.#c.callDefaults, mode: 'throw' }, oneKey('limit', key), options.cost === undefined ? {} : { cost: options.cost });
    this.#c.closing.throwIfAborted();
    const life = new CallLife(this.#c.events, call);
    let decided;
    try {
      decided = await this.#c.lines.ask(call);
    } catch (error) {
      life.ended(error);
      throw error;
    }
    const { result, extra } = decided;
    let booked = result.status === 'booked';
    let grant = booked ? grantOf(result, extra) : undefined;
    if (grant !== undefined && extra.store.mayStart?.(this.#c.name, result.members, result.startAt) === false) {
      // The store may have given the slot back (this process's liveness stamps lapsed): not started.
      this.#c.slots.release(call, grant);
      booked = false;
      grant = undefined;
    }
    const startedAt = performance.now();
    const retryAfterMs = booked ? 0 : Math.max(1, result.waitMs);
    if (booked) life.started();
    else life.refused(limitedError(call, result, retryAfterMs));
    // Read where the decision was taken: the store, or the local fallback while the store is down.
    // A read that fails leaves the decision standing, with what is left unknown (below): said as a debug event.
    const usage = await extra.store
      .inspect(this.#c.name, call.encoded, call.rules, this.#c.maxHoldMs)
      .catch((error: unknown) =>
        this.#c.notify('debug', { message: "cannot read the key's usage after limit(): remaining 0 is reported", key: call.key, error }),
      );
    let reported = false;
    const done = (): void => {
      if (reported || grant === undefined) return;
      reported = true;
      this.#c.slots.complete(call, grant, startedAt);
      life.completed();
    };
    if (usage === undefined) {
      // The decision stands; what is left is unknown: none, as far as the caller should assume.
      return { success: booked, remaining: 0, resetInMs: retryAfterMs, retryAfterMs, done };
    }
    // The rule with the fewest calls left: it says when more room comes.
    const binding = withRemaining(usage).reduce((least, rule) => (rule.remaining < least.remaining ? rule : least));
    return { success: booked, remaining: booked ? binding.remaining : 0, resetInMs: binding.resetInMs, retryAfterMs, done };
  }
}
