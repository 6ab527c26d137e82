/**
 * vendor-throttle, through its public API (lib/index.ts), on a RedisStore with a plain ioredis
 * client. Mode as its docs recommend (README "Queue"): `queue` for batch jobs and bursts, `delay`
 * (the default) otherwise. Every other option is left at its default.
 */
import { RedisStore, Throttle, type ThrottleMode } from '../../lib/index.js';
import { ruleLabel, type Contender, type ContenderId } from './contender.js';

export function vendorThrottle(mode: Extract<ThrottleMode, 'queue' | 'delay'>): Contender {
  const id: ContenderId = mode === 'queue' ? 'vt-queue' : 'vt-delay';
  return {
    id,
    label: `vendor-throttle ${mode}`,
    describe: (rules) =>
      `new Throttle({ rules: [${rules.map((r) => `'${ruleLabel(r)}'`).join(', ')}], mode: '${mode}', store: new RedisStore(redis) }), other options default`,
    async create(context) {
      const redis = await context.connect();
      const throttle = new Throttle({
        name: 'compare',
        rules: context.rules.map((rule) => ({ limit: rule.limit, windowMs: rule.windowMs })),
        store: new RedisStore(redis, { prefix: context.runId }),
        mode,
      });
      return {
        schedule: (user, fn) => throttle.schedule(user, fn),
        close: () => throttle.close(),
      };
    },
  };
}
