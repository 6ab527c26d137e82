import type { Contender, ContenderId } from './contender.js';
import { bottleneck } from './contender-bottleneck.js';
import { pQueue } from './contender-p-queue.js';
import { rateLimiterFlexible } from './contender-rate-limiter-flexible.js';
import { sortedSet } from './contender-sorted-set.js';
import { vendorThrottle } from './contender-vendor-throttle.js';

/** Every contender, in report order. */
export const CONTENDERS: readonly Contender[] = [
  vendorThrottle(),
  bottleneck('reservoir'),
  bottleneck('minTime'),
  rateLimiterFlexible(),
  pQueue(),
  sortedSet(),
];

export function contenderById(id: ContenderId): Contender {
  const found = CONTENDERS.find((contender) => contender.id === id);
  if (!found) throw new Error(`Unknown contender ${id}`);
  return found;
}
