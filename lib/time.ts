/*
 * Time: where this process's clock stands against the store's (StoreClock), and waiting for a
 * time, abortably, with nothing left running once it settles (sleep, withTimeout).
 */
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

  /** Whether a round trip was sampled yet (before one, the bounds tell nothing). */
  get sampled(): boolean {
    return this.#low !== -Infinity;
  }

  /** The earliest the store's clock can read at local time `at` (what surely no longer counts there: the journal's pruning). */
  earliestStoreTime(at: number): number {
    return at + this.#lowBound(at);
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

/** Longest delay `setTimeout` takes; a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Resolves after `ms` (any length: waits past {@link MAX_TIMER_MS} are chained), or rejects with the
 * reason of the first of `signals` to abort, clearing its timer and listeners either way: nothing is
 * left running once it settles.
 */
export function sleep(ms: number, signals: ReadonlyArray<AbortSignal | undefined>): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const active = signals.filter((signal): signal is AbortSignal => signal !== undefined);
    const aborted = active.find((signal) => signal.aborted);
    if (aborted) {
      reject(aborted.reason);
      return;
    }
    const onAbort = function (this: AbortSignal): void {
      finish();
      reject(this.reason);
    };
    const finish = (): void => {
      clearTimeout(timer);
      for (const signal of active) signal.removeEventListener('abort', onAbort);
    };
    const until = performance.now() + ms;
    const arm = (left: number): NodeJS.Timeout =>
      setTimeout(
        () => {
          // Timers may fire up to a millisecond early: never resolve before `ms` has passed.
          const rest = until - performance.now();
          if (rest > 0) {
            timer = arm(rest);
            return;
          }
          finish();
          resolve();
        },
        // Whole ms: a timer of a fractional delay fires early most of the time (libuv counts whole
        // ms from the start of the loop's turn), and each early one costs a wakeup more.
        Math.min(Math.ceil(left), MAX_TIMER_MS),
      );
    let timer = arm(ms);
    for (const signal of active) signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `promise`, or a rejection with `error()` once `ms` have passed (no bound past {@link MAX_TIMER_MS}),
 * or with the reason of `signal` once it aborts; the timer and listener are cleared either way. A
 * late rejection of `promise` is left handled; a late value goes to `late`, if given (what it
 * booked may need giving back).
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, error: () => Error, late?: (value: T) => void, signal?: AbortSignal): Promise<T> {
  const bounded = ms <= MAX_TIMER_MS;
  if (!bounded && signal === undefined) return promise;
  if (signal === undefined) return beforeTimer(promise, ms, error, late);
  let expired = false;
  promise.then(
    (value) => {
      if (expired) late?.(value);
    },
    () => undefined,
  );
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  const cut = new Promise<never>((_resolve, reject) => {
    const expire = (reason: unknown): void => {
      expired = true;
      reject(reason);
    };
    if (bounded) timer = setTimeout(() => expire(error()), ms);
    if (signal?.aborted) expire(signal.reason);
    else if (signal) signal.addEventListener('abort', (onAbort = () => expire(signal.reason)), { once: true });
  });
  return Promise.race([promise, cut]).finally(() => {
    clearTimeout(timer);
    if (onAbort) signal!.removeEventListener('abort', onAbort);
  });
}

/** `withTimeout` without a signal: one promise, settled by whichever comes first (every call's `fn` and every Redis command). */
function beforeTimer<T>(promise: Promise<T>, ms: number, error: () => Error, late: ((value: T) => void) | undefined): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let expired = false;
    const timer = setTimeout(() => {
      expired = true;
      reject(error());
    }, ms);
    promise.then(
      (value) => {
        if (expired) {
          late?.(value);
          return;
        }
        clearTimeout(timer);
        resolve(value);
      },
      (reason: unknown) => {
        if (expired) return;
        clearTimeout(timer);
        reject(reason);
      },
    );
  });
}
