/**
 * `require('vendor-throttle')` from CommonJS, on the Node versions `engines` names (20.19+ can
 * `require()` an ES module without top-level await, when the `exports` map lets it): the package as
 * npm publishes it, built from lib/ into a staging folder and packed, required by a CommonJS script
 * in a child process.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import ts from 'typescript';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const SCRIPT = `
const { Throttle, RateLimitedError } = require('vendor-throttle');
const throttle = new Throttle({ name: 'acme', rules: ['1/s'], maxDelayMs: 0 });
(async () => {
  const first = await throttle.schedule('u', () => 42);
  const second = await throttle.schedule('u', () => 43).catch((error) => error instanceof RateLimitedError ? 'refused' : String(error));
  await throttle.close();
  console.log(JSON.stringify([first, second]));
})();
`;

const BULLMQ_SCRIPT = `
const { throttleProcessor } = require('vendor-throttle/bullmq');
const { Throttle } = require('vendor-throttle');
const throttle = new Throttle({ name: 'acme', rules: ['1/s'], mode: 'throw' });
let refused = 'none';
try {
  throttleProcessor(throttle, async () => 1, { key: () => 'u' });
} catch (error) {
  refused = error.name;
}
console.log(typeof throttleProcessor, refused);
throttle.close();
`;

describe('CommonJS: require("vendor-throttle")', function () {
  this.timeout(120_000);
  let work: string;

  before(() => {
    work = mkdtempSync(path.join(os.tmpdir(), 'vt-commonjs-'));
  });

  after(() => {
    rmSync(work, { recursive: true, force: true });
  });

  it('loads the published package and runs a throttle, and loads vendor-throttle/bullmq', () => {
    // Build as `npm run build` does, into a staging copy of the package.
    const staging = path.join(work, 'staging');
    mkdirSync(staging);
    copyFileSync(path.join(root, 'package.json'), path.join(staging, 'package.json'));
    const build = ts.getParsedCommandLineOfConfigFile(
      path.join(root, 'tsconfig.build.json'),
      {},
      { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => undefined },
    )!;
    const emitted = ts.createProgram(build.fileNames, { ...build.options, outDir: path.join(staging, 'dist') }).emit();
    expect(emitted.emitSkipped).to.equal(false);
    cpSync(path.join(root, 'lib/lua'), path.join(staging, 'dist/lua'), { recursive: true });
    const [info] = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work], {
        cwd: staging,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      }),
    ) as Array<{ filename: string }>;
    const consumer = path.join(work, 'consumer');
    mkdirSync(path.join(consumer, 'node_modules'), { recursive: true });
    execFileSync('tar', ['-xzf', path.join(work, info!.filename), '-C', path.join(consumer, 'node_modules')]);
    execFileSync('mv', [path.join(consumer, 'node_modules/package'), path.join(consumer, 'node_modules/vendor-throttle')]);
    // Its dependencies, from the repository's node_modules.
    for (const name of ['p-queue', 'eventemitter3', 'p-timeout', 'cli-progress', 'csv-parse']) {
      symlinkSync(path.join(root, 'node_modules', name), path.join(consumer, 'node_modules', name), 'dir');
    }
    writeFileSync(path.join(consumer, 'package.json'), `${JSON.stringify({ name: 'consumer', type: 'commonjs', private: true })}\n`);
    writeFileSync(path.join(consumer, 'index.js'), SCRIPT);
    const output = execFileSync(process.execPath, ['index.js'], { cwd: consumer, encoding: 'utf8' });
    expect(JSON.parse(output.trim())).to.deep.equal([42, 'refused']);
    // The BullMQ subpath, with bullmq installed beside it (an optional peer).
    symlinkSync(path.join(root, 'node_modules', 'bullmq'), path.join(consumer, 'node_modules', 'bullmq'), 'dir');
    writeFileSync(path.join(consumer, 'bullmq.js'), BULLMQ_SCRIPT);
    expect(execFileSync(process.execPath, ['bullmq.js'], { cwd: consumer, encoding: 'utf8' }).trim()).to.equal('function ThrottleConfigError');
  });
});
