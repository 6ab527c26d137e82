/**
 * vendor-throttle, through its public API (lib/index.ts), on a RedisStore with a plain ioredis
 * client, in its default configuration: no mode named (the one waiting discipline, `'wait'`), every
 * other option at its default. The store opens its own subscriber connection (`duplicate()`) the
 * first time a call waits for a completion; closing the limiter closes the throttle, then the store.
 * The library is the compiled package, as users run it (scripts/support/library.ts).
 */

const { RedisStore, Throttle } = library;
import { library } from '../support/library.js';
import { ruleLabel, type Contender } from './contender.js';

export function vendorThrottle(): Contender {
  return {
    id: 'vendor-throttle',
    label: 'vendor-throttle',
    describe: (rules) =>
      `new Throttle({ rules: [${rules.map((r) => `'${ruleLabel(r)}'`).join(', ')}], store: new RedisStore(redis) }), every other option default`,
    async create(context) {
      const redis = await context.connect();
      const store = new RedisStore(redis, { prefix: context.runId });
      const throttle = new Throttle({
        name: 'compare',
        rules: context.rules.map((rule) => ({ limit: rule.limit, windowMs: rule.windowMs })),
        store,
      });
      return {
        schedule: (user, fn) => throttle.schedule(user, fn),
        async close() {
          await throttle.close();
          await store.close();
        },
      };
    },
  };
}
