import { RateLimitedError, type WaitReason } from './errors.js';

/** Lines remembered at most; past it the oldest are forgotten. */
const MAX_KEYS = 10_000;

/**
 * How long a refusal is trusted at most: past it the store is asked again even if the refusal said
 * later (another process may have reset the key, `Throttle.reset`). One round trip per second per
 * saturated line at most.
 */
const TRUST_MS = 1_000;

interface Refusal {
  readonly until: number;
  /** `performance.now()` past which the store is asked again. */
  readonly trustedUntil: number;
  readonly cost: number;
  readonly reason: WaitReason;
  /** The user key the refusal names (the one whose rule binds). */
  readonly key: string;
}

/**
 * Lines the store refused lately (a line: an encoded key, or the keys of a call of several joined
 * by spaces): no slot for a call of `cost` or more before `until` (`performance.now()`). A call
 * that cannot wait that long is refused here without a round trip (a saturated key in `throw` mode
 * costs Redis one round trip a second); a completion or release this process writes for a key
 * forgets the refusals of every line that holds it, since room may have freed.
 */
export class Refusals {
  readonly #lines = new Map<string, Refusal>();
  /** Per encoded key, the lines of several keys remembered that hold it. */
  readonly #several = new Map<string, Set<string>>();

  /** Throws `RateLimitedError` when a call of `cost` on the line cannot start within `withinMs`. */
  check(line: string, cost: number, withinMs: number): void {
    const known = this.#lines.get(line);
    if (!known) return;
    const now = performance.now();
    const leftMs = Math.ceil(known.until - now);
    if (leftMs <= 0 || now >= known.trustedUntil) this.#delete(line);
    else if (cost >= known.cost && leftMs > withinMs) throw new RateLimitedError(known.key, known.reason, leftMs);
  }

  remember(line: string, cost: number, until: number, reason: WaitReason, key: string): void {
    const known = this.#lines.get(line);
    if (known && known.cost <= cost && known.until >= until) return;
    this.#delete(line);
    if (this.#lines.size >= MAX_KEYS) this.#delete(this.#lines.keys().next().value!);
    this.#lines.set(line, { until, trustedUntil: Math.min(until, performance.now() + TRUST_MS), cost, reason, key });
    if (line.includes(' ')) {
      for (const part of line.split(' ')) {
        let lines = this.#several.get(part);
        if (!lines) this.#several.set(part, (lines = new Set()));
        lines.add(line);
      }
    }
  }

  /** A completion or release on the (encoded) key: the refusals of every line that holds it go. */
  forget(key: string): void {
    this.#delete(key);
    const several = this.#several.get(key);
    if (several) for (const line of [...several]) this.#delete(line);
  }

  #delete(line: string): void {
    if (!this.#lines.delete(line) || !line.includes(' ')) return;
    for (const part of line.split(' ')) {
      const lines = this.#several.get(part);
      lines?.delete(line);
      if (lines?.size === 0) this.#several.delete(part);
    }
  }
}
