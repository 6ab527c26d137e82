/**
 * Bottleneck with its Redis clustering (`datastore: 'ioredis'`): one `Bottleneck.Group` per rule,
 * keyed by user (the Group gives each user a clustered limiter with its own id), every Group of a
 * process on one shared `IORedisConnection`, and `expiration` on every job, as its README's
 * "Clustering" section strongly recommends. Two configurations, the two its README offers for
 * "N per window":
 *
 * - `reservoir`: "Reservoir Intervals" (`reservoir` = `reservoirRefreshAmount` = N,
 *   `reservoirRefreshInterval` = T) plus `maxConcurrent` = N "for safety". Several rules are
 *   several Groups chained with `limiter.chain()`, the longest window first, so that the shortest
 *   one gates the start. `heartbeatInterval: 250`: with clustering the reservoir is only refreshed
 *   on a heartbeat, every 5 s by default; the maintainer advises 250 ms for windows of seconds
 *   (SGrondin/bottleneck#88).
 * - `minTime`: a smooth rate, `minTime` = the largest T/N of the rules, no reservoir (README
 *   "Quick start": "minTime and maxConcurrent are enough for the majority of use cases").
 */
import Bottleneck from 'bottleneck';
import { Redis } from 'ioredis';
import { longestFirst, ruleLabel, type Contender, type Rule } from './contender.js';

type Variant = 'reservoir' | 'minTime';

/** Expiration of every job: a crashed worker's jobs stop counting as running after this long. */
const JOB_EXPIRATION_MS = 10_000;

function reservoirOptions(rule: Rule): Bottleneck.ConstructorOptions {
  return {
    reservoir: rule.limit,
    reservoirRefreshAmount: rule.limit,
    reservoirRefreshInterval: rule.windowMs,
    maxConcurrent: rule.limit,
    heartbeatInterval: 250,
  };
}

function minTimeOf(rules: readonly Rule[]): number {
  return Math.max(...rules.map((rule) => Math.ceil(rule.windowMs / rule.limit)));
}

export function bottleneck(variant: Variant): Contender {
  return {
    id: variant === 'reservoir' ? 'bottleneck-reservoir' : 'bottleneck-mintime',
    label: `Bottleneck ${variant}`,
    describe(rules) {
      if (variant === 'minTime') return `Group (ioredis clustering) per user, minTime ${minTimeOf(rules)} ms, job expiration ${JOB_EXPIRATION_MS / 1000} s`;
      const groups = longestFirst(rules).map((r) => `{ reservoir ${r.limit}, refresh ${r.limit} every ${r.windowMs} ms, maxConcurrent ${r.limit} }`);
      return `Group (ioredis clustering) per user${groups.length > 1 ? ' per rule, chained' : ''}: ${groups.join(' → ')}, heartbeatInterval 250 ms, job expiration ${JOB_EXPIRATION_MS / 1000} s (${rules.map(ruleLabel).join(' + ')})`;
    },
    async create(context) {
      for (const rule of context.rules) {
        if (variant === 'reservoir' && rule.windowMs % 250 !== 0) {
          throw new Error(`Bottleneck needs reservoirRefreshInterval in multiples of 250 ms, got ${rule.windowMs}`);
        }
      }
      const client = await context.connect();
      const connection = new Bottleneck.IORedisConnection({ client, Redis });
      const errors: unknown[] = [];
      connection.on('error', (error) => errors.push(error));
      const perRule: Bottleneck.ConstructorOptions[] =
        variant === 'reservoir' ? longestFirst(context.rules).map(reservoirOptions) : [{ minTime: minTimeOf(context.rules), maxConcurrent: null }];
      const groups = perRule.map((options, i) => new Bottleneck.Group({ ...options, id: `${context.runId}-${i}`, connection }));
      for (const group of groups) group.on('error', (error: unknown) => errors.push(error));
      // The first limiter of each user's chain; the others are reached through chain().
      const heads = new Map<string, Bottleneck>();
      const headOf = (user: string): Bottleneck => {
        let head = heads.get(user);
        if (!head) {
          const chain = groups.map((group) => group.key(user));
          for (let i = 0; i + 1 < chain.length; i++) chain[i]!.chain(chain[i + 1]!);
          head = chain[0]!;
          heads.set(user, head);
        }
        return head;
      };
      return {
        async schedule(user, fn) {
          if (errors.length > 0) throw errors[0];
          await headOf(user).schedule({ expiration: JOB_EXPIRATION_MS }, fn);
        },
        async close() {
          // Group's clean-up timer (every timeout / 2) is not stopped by disconnect(); it is unref'd,
          // but this process runs more limiters after this one.
          for (const group of groups) clearInterval((group as unknown as { interval?: NodeJS.Timeout }).interval);
          await connection.disconnect(true);
        },
      };
    },
  };
}
