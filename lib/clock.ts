/**
 * How far the store's clock and this process's clock (`performance.now()`) can run apart, per ms:
 * each may be slewed by NTP (at most 500 ppm) in its own direction.
 */
export const MAX_DRIFT = 1e-3;

/**
 * Where this process's clock stands against a store's clock, learned from the decisions' round
 * trips (docs/design.md, "Clocks"). A decision sent at local `sentAt`, answered at `receivedAt`,
 * read the store clock `now` in between, so the offset (store − local) lay in
 * [now − receivedAt, now − sentAt]. Over many decisions the tightest bounds are kept: the
 * smallest upper bound and the largest lower bound, each widened by {@link MAX_DRIFT} for the time
 * since it was taken. So a slot is reached within about the shortest round trip seen, not the
 * current one, which grows when the event loop is busy.
 */
export class StoreClock {
  /** Upper bound of the offset, and the local time it was taken at. */
  #high = Infinity;
  #highAt = 0;
  /** Lower bound of the offset, and the local time it was taken at. */
  #low = -Infinity;
  #lowAt = 0;

  /**
   * One decision's round trip: `now` is the store's reading, rounded up to a whole ms. A sample
   * that contradicts the bounds kept (the store's clock was stepped, or another host answers after
   * a failover) replaces them.
   */
  sample(sentAt: number, receivedAt: number, now: number): void {
    const high = now - sentAt;
    const low = now - 1 - receivedAt;
    if (low > this.#highBound(receivedAt) || high < this.#lowBound(sentAt)) {
      this.#high = high;
      this.#highAt = sentAt;
      this.#low = low;
      this.#lowAt = receivedAt;
      return;
    }
    if (high <= this.#highBound(sentAt)) {
      this.#high = high;
      this.#highAt = sentAt;
    }
    // `now` may be up to 1 ms above the reading.
    if (low >= this.#lowBound(receivedAt)) {
      this.#low = low;
      this.#lowAt = receivedAt;
    }
  }

  /** The latest the store's clock can read at local time `at` (a completion's release). */
  storeTime(at: number): number {
    return at + this.#highBound(at);
  }

  /** The earliest local time at which the store's clock surely reads `storeTime` or later (a slot's start). */
  localTime(storeTime: number): number {
    // Solves at + low − MAX_DRIFT × (at − lowAt) = storeTime for `at`.
    const at = storeTime - this.#low;
    return at <= this.#lowAt ? at : (storeTime - this.#low - MAX_DRIFT * this.#lowAt) / (1 - MAX_DRIFT);
  }

  #highBound(at: number): number {
    return this.#high + MAX_DRIFT * Math.max(0, at - this.#highAt);
  }

  #lowBound(at: number): number {
    return this.#low - MAX_DRIFT * Math.max(0, at - this.#lowAt);
  }
}
