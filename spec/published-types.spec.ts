import { expect } from 'chai';
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** What a user compiles with: the strictest reading of the package's declarations. */
const CONSUMER_TSCONFIG = {
  compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, skipLibCheck: false, noEmit: true },
  include: ['*.ts'],
};

/** A project that does not use axios — and has no ioredis or prom-client either: no optional peer at all. */
const WITHOUT_AXIOS = `
import { MemoryStore, RedisStore, Throttle, type AxiosThrottleOptions } from 'vendor-throttle';

const throttle = new Throttle({ rules: ['30/min'], store: new MemoryStore() });
await throttle.schedule('u1', () => 1);
void RedisStore;
const fetchAcme = throttle.fetch({ key: () => 'u1' });
void fetchAcme;

// Without axios' types, throttle.axios() takes what an axios instance looks like, and nothing else.
const options: AxiosThrottleOptions = { key: (config) => config.url ?? 'anonymous' };
// @ts-expect-error not an axios instance
throttle.axios({}, options);
`;

/** A project that uses axios: axios' own types everywhere, and a typed per-request \`throttle\` option. */
const WITH_AXIOS = `
import axios, { type AxiosInstance, type AxiosResponse, type AxiosStatic, type InternalAxiosRequestConfig } from 'axios';
import { Throttle, type AxiosThrottleHandle } from 'vendor-throttle';

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
function same<A, B>(_check: Equal<A, B>): void {}

const throttle = new Throttle({ rules: ['30/min'] });
export const acme = axios.create({ baseURL: 'https://api.acme.example' });
const handle = throttle.axios(acme, {
  key: (config) => {
    same<typeof config, InternalAxiosRequestConfig>(true);
    return String(config.headers['x-acme-user']);
  },
  isThrottled: (response) => {
    same<typeof response, AxiosResponse>(true);
    return false;
  },
  getAdapter: axios.getAdapter,
});
same<typeof handle, AxiosThrottleHandle<AxiosInstance>>(true);
same<ReturnType<typeof throttle.axios<AxiosStatic>>['instance'], AxiosStatic>(true);
await acme.get('/v1/orders', { throttle: { key: 'u1', cost: 5, maxDelayMs: 0, priority: 1, retries: 0 } });
`;

/** A project with both Redis libraries: RedisStore takes the clients of either, and nothing else. */
const WITH_REDIS_CLIENTS = `
import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { RedisStore, type RedisClientLike } from 'vendor-throttle';

export const stores = [
  new RedisStore(new Redis()),
  new RedisStore(new Cluster([{ host: '127.0.0.1', port: 7000 }])),
  new RedisStore(createClient()),
  new RedisStore(createClient({ RESP: 2 })),
  new RedisStore(createClient({ RESP: 3 })),
  new RedisStore(createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] })),
];
export const client: RedisClientLike = stores[0]!.client;
// @ts-expect-error not a Redis client
new RedisStore({ get: () => null });
`;

/** A project with BullMQ: \`vendor-throttle/bullmq\` gives a processor a Worker takes, typed by the job's data. */
const WITH_BULLMQ = `
import { Worker, type Job } from 'bullmq';
import { Throttle } from 'vendor-throttle';
import { throttleProcessor, type ThrottleProcessorOptions } from 'vendor-throttle/bullmq';

interface Sync {
  readonly user: string;
}
const throttle = new Throttle({ rules: ['30/min'] });
const processor = throttleProcessor(throttle, async (job: Job<Sync, number>) => job.data.user.length, {
  key: (job) => [job.data.user, 'app'],
  waitMs: 100,
  maxStartedAttempts: 10,
});
export const worker = new Worker<Sync, number>('imports', processor, { connection: { host: '127.0.0.1' }, autorun: false });
export const options: ThrottleProcessorOptions<Job<Sync>> = { key: (job) => job.data.user };
// @ts-expect-error the key is read from the job's data, which has no id
throttleProcessor(throttle, async (job: Job<Sync, number>) => 1, { key: (job) => job.data.id });
`;

/** The one mistake the project above must be told about. */
const MISTYPED = `
import { acme } from './index.js';
await acme.get('/v1/orders', { throttle: { cost: 'x' } });
`;

/**
 * The package as npm publishes it: declarations emitted from lib/ by tsconfig.build.json into a copy
 * of package.json's folder, then `npm pack` (which applies `files`). Emitted here rather than read
 * from dist/, so that the spec checks the sources as they are, not the last build.
 */
function pack(work: string): string {
  const staging = path.join(work, 'staging');
  mkdirSync(staging);
  copyFileSync(path.join(root, 'package.json'), path.join(staging, 'package.json'));
  const build = ts.getParsedCommandLineOfConfigFile(
    path.join(root, 'tsconfig.build.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      },
    },
  )!;
  const options = {
    ...build.options,
    outDir: path.join(staging, 'dist'),
    declaration: true,
    emitDeclarationOnly: true,
    declarationMap: false,
    sourceMap: false,
  };
  const emitted = ts.createProgram(build.fileNames, options).emit();
  expect(emitted.emitSkipped, 'declarations emitted').to.equal(false);
  const [info] = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], {
      cwd: staging,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }),
  ) as Array<{ filename: string }>;
  const unpacked = path.join(work, 'unpacked');
  mkdirSync(unpacked);
  execFileSync('tar', ['-xzf', path.join(work, info!.filename), '-C', unpacked]);
  return path.join(unpacked, 'package');
}

/** A project in `dir` with the packed package copied in (a real folder: it resolves its peers from there) and `links` from the repository's node_modules. */
function consumer(dir: string, pkg: string, links: readonly string[], files: Readonly<Record<string, string>>): void {
  cpSync(pkg, path.join(dir, 'node_modules', 'vendor-throttle'), { recursive: true });
  for (const name of links) {
    mkdirSync(path.dirname(path.join(dir, 'node_modules', name)), { recursive: true });
    symlinkSync(path.join(root, 'node_modules', name), path.join(dir, 'node_modules', name), 'dir');
  }
  writeFileSync(path.join(dir, 'package.json'), `${JSON.stringify({ name: 'consumer', type: 'module', private: true })}\n`);
  writeFileSync(path.join(dir, 'tsconfig.json'), `${JSON.stringify(CONSUMER_TSCONFIG, null, 2)}\n`);
  for (const [name, text] of Object.entries(files)) writeFileSync(path.join(dir, name), text);
}

/** Type-checks the project in `dir` as `tsc -p dir` would; messages as `file:line TScode message`, paths relative to `dir`. */
function compile(dir: string): { program: ts.Program; diagnostics: string[] } {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    path.join(dir, 'tsconfig.json'),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
        throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
      },
    },
  )!;
  const program = ts.createProgram(parsed.fileNames, parsed.options);
  const diagnostics = ts.getPreEmitDiagnostics(program).map((diagnostic) => {
    const where = diagnostic.file
      ? `${path.relative(dir, diagnostic.file.fileName)}:${diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0).line + 1}`
      : '';
    return `${where} TS${diagnostic.code} ${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}`;
  });
  return { program, diagnostics };
}

describe('published types: the packed package compiles with skipLibCheck false', function () {
  this.timeout(120_000);
  let work: string;
  let pkg: string;

  before(function () {
    work = mkdtempSync(path.join(os.tmpdir(), 'vt-published-types-'));
    pkg = pack(work);
  });

  after(function () {
    rmSync(work, { recursive: true, force: true });
  });

  it('declares nothing @internal: what the adapters reach of a throttle stays out of its public type', function () {
    const marked = readdirSync(path.join(pkg, 'dist'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.d.ts'))
      .filter((file) => readFileSync(path.join(pkg, 'dist', file), 'utf8').includes('@internal'));
    expect(marked).to.deep.equal([]);
  });

  it('without axios (or any optional peer): no errors, and throttle.axios() still rejects what is not an axios instance', function () {
    const dir = path.join(work, 'without-axios');
    consumer(dir, pkg, ['@types/node'], { 'index.ts': WITHOUT_AXIOS });
    const axiosTypes = path.join(dir, 'node_modules/vendor-throttle/dist/adapters/axios-types.d.ts');
    const { program, diagnostics } = compile(dir);
    // Else axios was found after all (a node_modules above the temporary folder) and nothing is proved.
    expect(ts.resolveModuleName('axios', axiosTypes, program.getCompilerOptions(), ts.sys).resolvedModule, 'axios resolves from the package').to.equal(
      undefined,
    );
    expect(program.getSourceFile(axiosTypes), 'the declarations naming axios are compiled').to.not.equal(undefined);
    expect(diagnostics).to.deep.equal([]);
  });

  it('with ioredis and node-redis: RedisStore takes the clients and clusters of either, and nothing else', function () {
    const dir = path.join(work, 'with-redis-clients');
    consumer(dir, pkg, ['@types/node', 'ioredis', 'redis'], { 'index.ts': WITH_REDIS_CLIENTS });
    expect(compile(dir).diagnostics).to.deep.equal([]);
  });

  it('with BullMQ: the vendor-throttle/bullmq subpath gives a processor a Worker takes', function () {
    const dir = path.join(work, 'with-bullmq');
    consumer(dir, pkg, ['@types/node', 'bullmq', 'ioredis'], { 'index.ts': WITH_BULLMQ });
    expect(compile(dir).diagnostics).to.deep.equal([]);
  });

  it("with axios: axios' own types, and a mistyped per-request throttle option is an error", function () {
    const dir = path.join(work, 'with-axios');
    consumer(dir, pkg, ['@types/node', 'axios'], { 'index.ts': WITH_AXIOS, 'mistyped.ts': MISTYPED });
    const { diagnostics } = compile(dir);
    expect(diagnostics).to.deep.equal(["mistyped.ts:3 TS2322 Type 'string' is not assignable to type 'number'."]);
  });
});
