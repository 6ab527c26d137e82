import axios, { type AxiosInstance, type AxiosResponse, type AxiosStatic, type InternalAxiosRequestConfig } from 'axios';
import { expect } from 'chai';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import type {
  AxiosConfigType,
  AxiosGetAdapterLike,
  AxiosGetAdapterType,
  AxiosInstanceLike,
  AxiosInstanceType,
  AxiosResponseType,
} from '../lib/adapters/axios-types.js';
import { Throttle as ThrottleClass, type AxiosThrottleHandle, type RuleString, type Throttle } from '../lib/index.js';

/** `true` when A and B are the same type (not merely assignable). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** Compiles only when given `true`: `assertType<Equal<X, Y>>()`. */
function assertType<_Check extends true>(): void {}
/** Compiles only when `value` is assignable to T. */
function expectType<T>(_value: T): void {}
/** `exactly<T>()(value)` compiles only when the type of `value` is exactly T (else: "Expected 3 arguments"). */
function exactly<Expected>() {
  return <Actual>(_value: Actual, ..._mismatch: Equal<Actual, Expected> extends true ? [] : [expected: Expected, got: Actual]): void => {};
}

/**
 * Compile-time assertions about the adapters' types. Never called: `tsc` (npm test) checks this file,
 * and the spec below compiles it again so that `mocha` alone also proves it.
 */
export function adapterTypes(throttle: Throttle): void {
  // Rule strings: a unit TypeScript knows, or a cap; anything else does not compile.
  const good: RuleString[] = ['5/s', '30/min', '20/500ms', '2/1.5h', '10000/day', '4 concurrent'];
  new ThrottleClass({ rules: good });
  new ThrottleClass({ rules: ['30/min', { limit: 5, windowMs: 1_000 }, { concurrent: 2 }] });
  // @ts-expect-error no such unit
  new ThrottleClass({ rules: ['5/fortnight'] });
  // @ts-expect-error a limit is a number
  new ThrottleClass({ rules: ['five/s'] });

  // axios: the instance keeps its type, requests keep theirs, `throttle` is a typed request option.
  const acme = axios.create({ baseURL: 'https://api.acme.example' });
  const handle = throttle.axios(acme, {
    key: (config) => {
      expectType<InternalAxiosRequestConfig>(config);
      return config.headers['x-acme-user'];
    },
    isThrottled: (response) => {
      exactly<AxiosResponse>()(response);
      return false;
    },
  });
  exactly<AxiosThrottleHandle<AxiosInstance>>()(handle);
  exactly<AxiosInstance>()(handle.instance);
  assertType<Equal<ReturnType<typeof throttle.axios<AxiosStatic>>['instance'], AxiosStatic>>();
  expectType<AxiosThrottleHandle<AxiosStatic>>(throttle.axios(axios, { key: () => 42 }));

  interface Order {
    readonly id: number;
  }
  const orders = acme.get<Order[]>('/v1/orders', { throttle: { key: 'u1', cost: 2, maxDelayMs: 5_000, priority: 1, retries: 0 } });
  exactly<Promise<AxiosResponse<Order[]>>>()(orders);
  const created = acme.post<Order>('/v1/orders', { item: 1 });
  exactly<Promise<AxiosResponse<Order>>>()(created);
  // @ts-expect-error cost is a number
  void acme.get('/v1/orders', { throttle: { cost: 'high' } });
  // @ts-expect-error no such per-request option
  void acme.get('/v1/orders', { throttle: { burst: 3 } });
  // @ts-expect-error a key is a string or a number
  throttle.axios(acme, { key: () => ({ id: 1 }) });
  // @ts-expect-error the key option is required
  throttle.axios(acme, {});
  // axios-types.ts: axios' own types where axios resolves (its @ts-ignore would turn a misspelt name into the fallback)…
  assertType<Equal<AxiosInstanceType, AxiosInstance>>();
  assertType<Equal<AxiosConfigType, InternalAxiosRequestConfig>>();
  assertType<Equal<AxiosResponseType, AxiosResponse>>();
  assertType<Equal<AxiosGetAdapterType, typeof axios.getAdapter>>();
  // …and the structural fallback, for a project where they do not resolve, still takes a real instance.
  expectType<AxiosInstanceLike>(acme);
  expectType<AxiosInstanceLike>(axios);
  expectType<AxiosGetAdapterLike>(axios.getAdapter);

  // fetch: the global fetch's signature, or the injected fetch's.
  const fetchAcme = throttle.fetch({
    key: (input, init) => {
      exactly<string | URL | Request>()(input);
      exactly<RequestInit | undefined>()(init);
      return 'u1';
    },
    isThrottled: async (response) => {
      exactly<Response>()(response);
      return false;
    },
  });
  exactly<typeof fetch>()(fetchAcme);
  assertType<Equal<Awaited<ReturnType<typeof fetchAcme>>, Response>>();

  const tracedFetch = async (url: string, init?: RequestInit & { trace?: string }): Promise<Response> => fetch(url, init);
  const fetchTraced = throttle.fetch({
    fetch: tracedFetch,
    key: (url, init) => {
      exactly<string>()(url);
      exactly<(RequestInit & { trace?: string }) | undefined>()(init);
      return url;
    },
    cost: (url) => (url.endsWith('/bulk') ? 5 : 1),
  });
  exactly<typeof tracedFetch>()(fetchTraced);
  // @ts-expect-error not a fetch: what it resolves to has no status and headers
  throttle.fetch({ fetch: async (url: string) => url, key: () => 'u1' });
  // @ts-expect-error the fetch's own argument types
  void fetchTraced(new URL('https://api.acme.example'));

  // wrap: fn's parameters (and this), its result as a promise.
  async function getUser(id: string, full: boolean): Promise<{ id: string; full: boolean }> {
    return { id, full };
  }
  const throttledGetUser = throttle.wrap(getUser, { key: (id) => id, cost: (_id, full) => (full ? 2 : 1) });
  exactly<(id: string, full: boolean) => Promise<{ id: string; full: boolean }>>()(throttledGetUser);
  const add = throttle.wrap((a: number, b: number) => a + b, { key: (a) => a });
  exactly<(a: number, b: number) => Promise<number>>()(add);
  const counter = {
    n: 0,
    bump(this: { n: number }, by: number): number {
      return (this.n += by);
    },
  };
  const bump = throttle.wrap(counter.bump, { key: () => 'counter' });
  exactly<(this: { n: number }, by: number) => Promise<number>>()(bump);
  // @ts-expect-error key receives fn's parameters
  throttle.wrap(getUser, { key: (id: number) => id });
  // @ts-expect-error the wrapped function keeps fn's parameter types
  void throttledGetUser(1, true);
}

describe('adapter types', () => {
  it('compile: the assertions above hold and every @ts-expect-error is needed', function () {
    this.timeout(60_000);
    const file = fileURLToPath(import.meta.url);
    const root = path.resolve(path.dirname(file), '..');
    const config = ts.readConfigFile(path.join(root, 'tsconfig.json'), (name) => ts.sys.readFile(name));
    const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, root);
    const program = ts.createProgram([file], { ...options, noEmit: true });
    const diagnostics = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
      const where = diagnostic.file
        ? `${path.relative(root, diagnostic.file.fileName)}:${diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0).line + 1}`
        : '';
      return `${where} TS${diagnostic.code} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
    });
    expect(diagnostics).to.deep.equal([]);
  });
});
