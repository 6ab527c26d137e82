import type { Store } from '../../lib/store.js';

/** A store that forwards every method to `inner`, except those in `overrides` (to count or slow calls). */
export function delegatingStore(inner: Store, overrides: Partial<Store>): Store {
  return {
    reserve: (...args) => inner.reserve(...args),
    settle: (...args) => inner.settle(...args),
    inspect: (...args) => inner.inspect(...args),
    pause: (...args) => inner.pause(...args),
    ...(inner.listen ? { listen: (...args: Parameters<NonNullable<Store['listen']>>) => inner.listen!(...args) } : {}),
    ...(inner.leave ? { leave: (...args: Parameters<NonNullable<Store['leave']>>) => inner.leave!(...args) } : {}),
    restore: (...args) => inner.restore(...args),
    close: () => inner.close(),
    ...(inner.singleClock === undefined ? {} : { singleClock: inner.singleClock }),
    ...(inner.multiKey === undefined ? {} : { multiKey: inner.multiKey }),
    ...overrides,
  };
}
