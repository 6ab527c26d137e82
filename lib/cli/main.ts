#!/usr/bin/env node
/**
 * The `vendor-throttle` command (package.json `bin`): `run` sends a batch of requests through the
 * throttle, `inspect` shows what the shared log holds. See docs/cli.md.
 */
import { readFileSync } from 'node:fs';
import { ThrottleConfigError } from '../errors.js';
import { suggestName } from '../validate.js';
import { HELP, parseInspectArgs, parseRunArgs } from './args.js';
import { CliError, EXIT, errorText } from './errors.js';
import { INSPECT_HELP, MAIN_HELP, RUN_HELP } from './help.js';

const COMMANDS = ['run', 'inspect'];

/** Commands users write for one of these, by what they mean. */
const COMMAND_SYNONYMS: Readonly<Record<string, string>> = { send: 'run', batch: 'run', show: 'inspect', status: 'inspect', usage: 'inspect' };

/** An unknown command, with the one meant when there is one. */
function unknownCommand(given: string, where: string): ThrottleConfigError {
  const hint = suggestName(given, COMMANDS, COMMAND_SYNONYMS);
  return new ThrottleConfigError(
    `${where}unknown command '${given}'${hint === undefined ? '' : ` (did you mean '${hint}'?)`} (commands: run, inspect; see vendor-throttle --help)`,
    '<command>',
  );
}

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
      if (text === undefined) throw unknownCommand(topic!, 'help: ');
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
      throw unknownCommand(command, '');
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    // A bad argument (a flag, the input file, the results file) is found before anything is sent: exit 2.
    const told = error instanceof CliError || error instanceof ThrottleConfigError;
    process.stderr.write(`vendor-throttle: ${told ? error.message : error instanceof Error ? (error.stack ?? errorText(error)) : String(error)}\n`);
    process.exit(error instanceof CliError ? error.exitCode : error instanceof ThrottleConfigError ? EXIT.usage : EXIT.fatal);
  },
);
