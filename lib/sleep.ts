/**
 * Resolves after `ms`, or rejects with the reason of the first of `signals` to abort, clearing its
 * timer and listeners either way: nothing is left running once it settles.
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
    const timer = setTimeout(() => {
      finish();
      resolve();
    }, ms);
    for (const signal of active) signal.addEventListener('abort', onAbort, { once: true });
  });
}
