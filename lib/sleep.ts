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
      setTimeout(() => {
        const rest = until - performance.now();
        if (rest > 1) {
          timer = arm(rest);
          return;
        }
        finish();
        resolve();
      }, Math.min(left, MAX_TIMER_MS));
    let timer = arm(ms);
    for (const signal of active) signal.addEventListener('abort', onAbort, { once: true });
  });
}
