/**
 * The package as a user installs it before it is on the registry: `npm pack` of a checkout (which
 * has no dist/: npm runs the `prepare` script, the build), then `npm install <tarball>` into a new
 * project, its dependencies from the npm cache that `npm ci` filled (`npm ci --offline` on a lockfile
 * pinned as this repository's: no registry at all). The
 * checkout is the files git would commit (tracked, or untracked and not ignored), copied from the
 * working tree: edits are tested, and a dist/ left by an earlier build is not.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Runs a throttle with the default store: the first call made, the second refused (1/s, no waiting). */
const ESM = `
import { MemoryStore, RateLimitedError, Throttle } from 'vendor-throttle';
const throttle = new Throttle({ name: 'acme', rules: ['1/s'], maxDelayMs: 0 });
const first = await throttle.schedule('u', () => 42);
const second = await throttle.schedule('u', () => 43).catch((error) => (error instanceof RateLimitedError ? 'refused' : String(error)));
await throttle.close();
console.log(JSON.stringify([throttle.store instanceof MemoryStore, first, second]));
`;

const COMMONJS = `
const { Throttle, RateLimitedError } = require('vendor-throttle');
const { version } = require('vendor-throttle/package.json');
const throttle = new Throttle({ name: 'acme', rules: ['1/s'], maxDelayMs: 0 });
(async () => {
  const first = await throttle.schedule('u', () => 42);
  const second = await throttle.schedule('u', () => 43).catch((error) => (error instanceof RateLimitedError ? 'refused' : String(error)));
  await throttle.close();
  console.log(JSON.stringify([version, first, second]));
})();
`;

/** Copies the files of the checkout at `root` that git would commit into `dir`. */
function checkout(dir: string): void {
  const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' });
  for (const file of listed.split('\0')) {
    // node_modules here may be a symlink, which `node_modules/` in .gitignore does not match.
    if (file === '' || file === 'node_modules' || !existsSync(path.join(root, file))) continue;
    mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    cpSync(path.join(root, file), path.join(dir, file));
  }
}

interface LockEntry {
  readonly version?: string;
  readonly resolved?: string;
  readonly integrity?: string;
  readonly dependencies?: Readonly<Record<string, string>>;
  readonly [field: string]: unknown;
}

/**
 * The lockfile of a project that depends on the tarball alone: the package's runtime dependencies
 * pinned as this repository's lockfile pins them, so that \`npm ci --offline\` takes every one from
 * the tarballs \`npm ci\` cached (by integrity) and needs no registry metadata at all.
 */
function projectLock(tarball: string): object {
  const lock = JSON.parse(readFileSync(path.join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const own = lock.packages['']!;
  const packages: Record<string, LockEntry> = {};
  const wanted = Object.keys(own.dependencies ?? {});
  for (let name = wanted.shift(); name !== undefined; name = wanted.shift()) {
    for (const [where, entry] of Object.entries(lock.packages)) {
      if (where.endsWith(`node_modules/${name}`) && packages[where] === undefined) {
        packages[where] = entry;
        wanted.push(...Object.keys(entry.dependencies ?? {}));
      }
    }
  }
  const integrity = `sha512-${createHash('sha512').update(readFileSync(tarball)).digest('base64')}`;
  const { version, dependencies, peerDependencies, peerDependenciesMeta, engines, bin, license } = own as Record<string, unknown>;
  return {
    name: 'project',
    lockfileVersion: 3,
    requires: true,
    packages: {
      '': { name: 'project', dependencies: { 'vendor-throttle': `file:${tarball}` } },
      'node_modules/vendor-throttle': {
        version,
        resolved: `file:${tarball}`,
        integrity,
        license,
        dependencies,
        peerDependencies,
        peerDependenciesMeta,
        engines,
        bin,
      },
      ...packages,
    },
  };
}

describe('install: the packed package, installed from its tarball', function () {
  this.timeout(60_000);
  let work: string;
  let project: string;
  let version: string;

  before(function () {
    work = mkdtempSync(path.join(os.tmpdir(), 'vt-install-'));
    const source = path.join(work, 'source');
    checkout(source);
    expect(existsSync(path.join(source, 'dist')), 'the checkout has no dist/').to.equal(false);
    // The build's devDependencies (typescript), as `npm ci` installed them.
    symlinkSync(path.join(root, 'node_modules'), path.join(source, 'node_modules'), 'dir');
    version = (JSON.parse(readFileSync(path.join(source, 'package.json'), 'utf8')) as { version: string }).version;
    const [packed] = JSON.parse(
      execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: source, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }),
    ) as Array<{ filename: string }>;
    project = path.join(work, 'project');
    mkdirSync(project);
    const tarball = path.join(work, packed!.filename);
    writeFileSync(
      path.join(project, 'package.json'),
      `${JSON.stringify({ name: 'project', private: true, dependencies: { 'vendor-throttle': `file:${tarball}` } })}\n`,
    );
    writeFileSync(path.join(project, 'package-lock.json'), `${JSON.stringify(projectLock(tarball), null, 2)}\n`);
    writeFileSync(path.join(project, 'esm.mjs'), ESM);
    writeFileSync(path.join(project, 'commonjs.cjs'), COMMONJS);
    execFileSync('npm', ['ci', '--offline', '--no-audit', '--no-fund'], { cwd: project, stdio: ['ignore', 'pipe', 'pipe'] });
  });

  after(function () {
    rmSync(work, { recursive: true, force: true });
  });

  // Importing the package also reads the Redis store's Lua scripts from dist/lua.
  it('imports as an ES module and schedules a call with the default MemoryStore', function () {
    const output = execFileSync(process.execPath, ['esm.mjs'], { cwd: project, encoding: 'utf8' });
    expect(JSON.parse(output)).to.deep.equal([true, 42, 'refused']);
  });

  it("loads with require(), and require('vendor-throttle/package.json') too", function () {
    const output = execFileSync(process.execPath, ['commonjs.cjs'], { cwd: project, encoding: 'utf8' });
    expect(JSON.parse(output)).to.deep.equal([version, 42, 'refused']);
  });

  it('installs the vendor-throttle command: --help prints the usage and exits 0, --version the version', function () {
    const bin = path.join(project, 'node_modules/.bin/vendor-throttle');
    // execFileSync throws on a non-zero exit.
    expect(execFileSync(bin, ['--help'], { cwd: project, encoding: 'utf8' })).to.match(/^Usage:\n {2}vendor-throttle run /m);
    expect(execFileSync(bin, ['--version'], { cwd: project, encoding: 'utf8' })).to.equal(`${version}\n`);
  });
});
