#!/usr/bin/env node
/**
 * The `vendor-throttle` command (package.json `bin`): `run` sends a batch of requests through the
 * throttle, `inspect` shows what the shared log holds. See docs/cli.md.
 */
import { readFileSync } from 'node:fs';
import { HELP, parseInspectArgs, parseRunArgs } from './args.js';
import { CliError, EXIT, errorText } from './errors.js';
import { INSPECT_HELP, MAIN_HELP, RUN_HELP } from './help.js';

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** Runs one command line; resolves with the exit code. */
async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
      process.stderr.write(MAIN_HELP);
      return EXIT.usage;
    case '-h':
    case '--help':
      process.stdout.write(MAIN_HELP);
      return EXIT.ok;
    case 'help': {
      const topic = rest[0];
      const text = topic === 'run' ? RUN_HELP : topic === 'inspect' ? INSPECT_HELP : topic === undefined ? MAIN_HELP : undefined;
      if (text === undefined) throw new CliError(`help: unknown command '${topic}' (commands: run, inspect)`);
      process.stdout.write(text);
      return EXIT.ok;
    }
    case '-v':
    case '--version':
      process.stdout.write(`${version()}\n`);
      return EXIT.ok;
    case 'run': {
      const options = parseRunArgs(rest);
      if (options === HELP) {
        process.stdout.write(RUN_HELP);
        return EXIT.ok;
      }
      // Loaded only here, so that --help and --version start fast.
      const { run } = await import('./run.js');
      return run(options);
    }
    case 'inspect': {
      const options = parseInspectArgs(rest);
      if (options === HELP) {
        process.stdout.write(INSPECT_HELP);
        return EXIT.ok;
      }
      const { inspect } = await import('./inspect.js');
      return inspect(options);
    }
    default:
      throw new CliError(`unknown command '${command}' (commands: run, inspect; see vendor-throttle --help)`);
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `vendor-throttle: ${error instanceof CliError ? error.message : error instanceof Error ? (error.stack ?? errorText(error)) : String(error)}\n`,
    );
    process.exit(error instanceof CliError ? error.exitCode : EXIT.fatal);
  },
);
