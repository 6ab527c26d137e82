/**
 * The library as its users run it, for the scripts that measure its cost (scripts/compare's
 * contender, scripts/bench/profile.ts): the compiled package in dist/ (`npm run build`, which
 * `npm run bench` runs first). Loaded from lib/ through tsx instead, each module carries tsx's
 * esbuild transform, which names function expressions at run time (`__name`, about a tenth of a
 * call's worker CPU in scripts/bench/profile.ts) and runs in modules that do nothing else of the call.
 *
 * lib/ is loaded instead, and this is said on stderr, when dist/ is missing or older than a file of
 * lib/, or with `VT_BENCH_SOURCE=1`.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Library from '../../lib/index.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const LIB_DIR = join(ROOT, 'lib');
export const DIST_DIR = join(ROOT, 'dist');

/** The newest modification time of the files under `dir` (ms). */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return latest;
}

/** Why lib/ is loaded instead of dist/, or undefined when dist/ is used. */
function sourceReason(): string | undefined {
  if (process.env.VT_BENCH_SOURCE === '1') return 'VT_BENCH_SOURCE=1';
  const built = join(DIST_DIR, 'index.js');
  if (!existsSync(built)) return 'no dist/ (npm run build)';
  if (newest(LIB_DIR) > statSync(built).mtimeMs) return 'dist/ is older than lib/ (npm run build)';
  return undefined;
}

const reason = sourceReason();
if (reason !== undefined) console.error(`vendor-throttle loaded from lib/ through tsx (${reason}): its cost includes tsx's transform`);

/** Where the library was loaded from. */
export const libraryDir = reason === undefined ? DIST_DIR : LIB_DIR;
export const library = (await import(pathToFileURL(join(libraryDir, 'index.js')).href)) as typeof Library;
