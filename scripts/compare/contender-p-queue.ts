/**
 * p-queue, one queue per user in each process, with the limit divided by the number of processes
 * (what users do without shared state): `intervalCap` = floor(N / processes), `interval` = T, and
 * `strict: true`, the sliding window its readme recommends "when interacting with APIs that
 * enforce strict rate limits". Several rules are nested queues, the longest window outside.
 * No Redis at all.
 */
import PQueue from 'p-queue';
import { longestFirst, type Contender, type Rule } from './contender.js';

function share(rule: Rule, workers: number): number {
  return Math.max(1, Math.floor(rule.limit / workers));
}

export function pQueue(): Contender {
  return {
    id: 'p-queue',
    label: 'p-queue per process',
    describe: (rules, workers) =>
      longestFirst(rules)
        .map((r) => `new PQueue({ intervalCap: ${share(r, workers)}, interval: ${r.windowMs}, strict: true })`)
        .join(' around ') + ` per user per process (limit / ${workers} processes)`,
    async create(context) {
      const rules = longestFirst(context.rules);
      const queues = new Map<string, PQueue[]>();
      const queuesOf = (user: string): PQueue[] => {
        let list = queues.get(user);
        if (!list) {
          list = rules.map((rule) => new PQueue({ intervalCap: share(rule, context.workers), interval: rule.windowMs, strict: true }));
          queues.set(user, list);
        }
        return list;
      };
      const run = (list: readonly PQueue[], i: number, fn: () => Promise<void>): Promise<void> =>
        i === list.length ? fn() : list[i]!.add(() => run(list, i + 1, fn));
      return {
        schedule: (user, fn) => run(queuesOf(user), 0, fn),
        async close() {
          for (const list of queues.values()) for (const queue of list) queue.clear();
          queues.clear();
        },
      };
    },
  };
}
