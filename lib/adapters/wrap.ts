import { ThrottleConfigError } from '../errors.js';
import { describe } from '../rules.js';
import type { Scheduler } from './scheduler.js';
import { checkCallOptions, pickCallOptions } from './call-options.js';
import type { Throttled, WrapOptions } from './options.js';

/**
 * `fn` with every call sent through `throttle.schedule()`, keyed by `options.key(...args)`: same
 * parameters and `this`, its result as a promise. Cost, `maxDelayMs` and priority may be fixed or
 * picked from the arguments, and so may an `AbortSignal` for the wait.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any function
export function throttleWrap<F extends (...args: any[]) => unknown>(throttle: Scheduler, fn: F, options: WrapOptions<Parameters<F>>): Throttled<F> {
  if (typeof fn !== 'function') throw new ThrottleConfigError(`Expected fn to be a function, got ${describe(fn)}`, 'fn');
  checkCallOptions(options, 'wrap', ['signal']);
  if (options.signal !== undefined && typeof options.signal !== 'function') {
    throw new ThrottleConfigError(`Expected wrap option signal to be a function, got ${describe(options.signal)}`, 'signal');
  }
  const throttled = async function (this: ThisParameterType<F>, ...args: Parameters<F>): Promise<Awaited<ReturnType<F>>> {
    const key = await options.key(...args);
    const signal = options.signal?.(...args);
    return throttle.schedule(key, () => fn.apply(this, args) as ReturnType<F>, { ...pickCallOptions(options, args), signal });
  };
  return throttled as Throttled<F>;
}
