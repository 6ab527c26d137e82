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
        Math.min(left, MAX_TIMER_MS),
      );
    let timer = arm(ms);
    for (const signal of active) signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * `promise`, or a rejection with `error()` once `ms` have passed (no bound past {@link MAX_TIMER_MS});
 * the timer is cleared either way. A late rejection of `promise` is left handled; a late value goes
 * to `late`, if given (what it booked may need giving back).
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, error: () => Error, late?: (value: T) => void): Promise<T> {
  if (!(ms <= MAX_TIMER_MS)) return promise;
  let expired = false;
  promise.then(
    (value) => {
      if (expired) late?.(value);
    },
    () => undefined,
  );
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => {
      expired = true;
      reject(error());
    }, ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
