/**
 * Every options object the library takes refuses a name it does not know, with a
 * ThrottleConfigError that names it and the closest known one (a misspelt option would otherwise
 * be ignored in plain JavaScript, or in options built at run time); the CLI does the same for flags.
 * `new Throttle()` and `schedule()` are covered in spec/throttle.spec.ts.
 */
import { expect } from 'chai';
import axios from 'axios';
import * as promClient from 'prom-client';
import { MemoryStore, RedisStore, Throttle, ThrottleConfigError, throttleMetrics } from '../lib/index.js';
import { parseInspectArgs, parseRunArgs } from '../lib/cli/args.js';
import { redisClient } from './support/hooks.js';

describe('unknown option names are refused everywhere, with the closest known one', () => {
  const throttle = new Throttle({ name: 'acme', rules: ['5/s'] });
  after(() => throttle.close());

  const cases: Array<[string, () => unknown, RegExp]> = [
    [
      'throttle.axios({ maxRetries })',
      () => throttle.axios(axios.create(), { key: () => 'u', maxRetries: 0 } as never),
      /Unknown axios option 'maxRetries' \(did you mean 'retries'\?\)/,
    ],
    ['throttle.fetch({ retry })', () => throttle.fetch({ key: () => 'u', retry: 5 } as never), /Unknown fetch option 'retry' \(did you mean 'retries'\?\)/],
    [
      'throttle.wrap(fn, { maxDelay })',
      () => throttle.wrap(async () => 1, { key: () => 'u', maxDelay: 5 } as never),
      /Unknown wrap option 'maxDelay' \(did you mean 'maxDelayMs'\?\)/,
    ],
    ['new MemoryStore({ nowFn })', () => new MemoryStore({ nowFn: () => 0 } as never), /Unknown MemoryStore option 'nowFn' \(did you mean 'now'\?\)/],
    [
      'new RedisStore(client, { commandTimeout })',
      () => new RedisStore(redisClient(), { commandTimeout: 100 } as never),
      /Unknown RedisStore option 'commandTimeout' \(did you mean 'commandTimeoutMs'\?\)/,
    ],
    [
      'new RedisStore(client, { recovery: { grace } })',
      () => new RedisStore(redisClient(), { recovery: { grace: 100 } } as never),
      /Unknown RedisStore recovery option 'grace' \(did you mean 'graceMs'\?\)/,
    ],
    [
      'throttleMetrics({ registery })',
      () => throttleMetrics(throttle, { client: promClient, registery: new promClient.Registry() } as never),
      /Unknown throttleMetrics option 'registery' \(did you mean 'registry'\?\)/,
    ],
  ];
  for (const [what, make, message] of cases) {
    it(what, () => {
      expect(make).to.throw(ThrottleConfigError, message);
    });
  }

  it('a name far from every known one gets no guess, only the list', () => {
    expect(() => throttle.fetch({ key: () => 'u', zzzzzzzz: 1 } as never)).to.throw(ThrottleConfigError, /Unknown fetch option 'zzzzzzzz'; known: key, cost/);
  });

  it('the CLI: an unknown flag names the closest known one', () => {
    expect(() => parseRunArgs(['--rules', '5/s'])).to.throw(ThrottleConfigError, /Unknown option '--rules' \(did you mean '--rule'\?\)/);
    expect(() => parseInspectArgs(['--nmae', 'acme'])).to.throw(ThrottleConfigError, /Unknown option '--nmae' \(did you mean '--name'\?\)/);
  });
});
