import type { ThrottleOptions } from '../../lib/options.js';
import { Throttle } from '../../lib/throttle.js';

/**
 * For the suite it is called in: a `make(options)` that builds a Throttle (rule 10/s unless given)
 * and closes every one it built after each test.
 */
export function useThrottles(): (options?: Partial<ThrottleOptions>) => Throttle {
  let throttles: Throttle[] = [];
  afterEach(async () => {
    await Promise.all(throttles.map((throttle) => throttle.close()));
    throttles = [];
  });
  return (options = {}) => {
    const throttle = new Throttle({ rules: ['10/s'], ...options });
    throttles.push(throttle);
    return throttle;
  };
}
