/**
 * A sandboxed BullMQ processor (a file the Worker runs in a child process): the throttle, its store
 * and its Redis client are made in the child, once, and the file exports the throttled processor.
 * spec/bullmq.spec.ts passes the test Redis and the keys' prefix through the environment.
 */
import type { SandboxedJob } from 'bullmq';
import { Redis } from 'ioredis';
import { throttleProcessor } from '../../lib/adapters/bullmq.js';
import { RedisStore } from '../../lib/stores/redis-store.js';
import { Throttle } from '../../lib/throttle.js';

const prefix = process.env.VT_SPEC_PREFIX!;
const redis = new Redis(process.env.VT_SPEC_REDIS_URL!);
const throttle = new Throttle({ name: 'vendor', rules: ['2/500ms'], store: new RedisStore(redis, { prefix }) });

export default throttleProcessor(
  throttle,
  async (job: SandboxedJob<{ user: string }>) => {
    // The call: recorded in Redis, where the spec reads every child's calls.
    await redis.rpush(`${prefix}:calls`, JSON.stringify({ id: job.id, user: job.data.user, start: Date.now() }));
    return `done ${job.id}`;
  },
  { key: (job) => job.data.user, waitMs: 50 },
);
