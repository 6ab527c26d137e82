/** A bad command line. Its message (empty for `--help`) is printed before the usage text. */
export class UsageError extends Error {}

/**
 * Runs `parse` on the command line. On a {@link UsageError} it prints the message and `usage` on
 * stderr, sets the exit code (2, or 0 for `--help`) and returns undefined; other errors propagate.
 */
export function settingsOrUsage<T>(parse: () => T, usage: string): T | undefined {
  try {
    return parse();
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    if (error.message) console.error(error.message);
    console.error(usage);
    process.exitCode = error.message ? 2 : 0;
    return undefined;
  }
}

/**
 * Reads `--name` and `--name=value` arguments (a bare flag is `'true'`) into a map, refusing
 * anything else and any name not in `known`; `--help` throws an empty {@link UsageError}.
 */
export function readFlags(argv: readonly string[], known: readonly string[]): Map<string, string> {
  const flags = new Map<string, string>();
  for (const arg of argv) {
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    if (!match) throw new UsageError(`Unexpected argument '${arg}'`);
    flags.set(match[1]!, match[2] ?? 'true');
  }
  for (const name of flags.keys()) if (name !== 'help' && !known.includes(name)) throw new UsageError(`Unknown option --${name}`);
  if (flags.has('help')) throw new UsageError('');
  return flags;
}

/**
 * On SIGINT or SIGTERM, runs `cleanup` (stopping the servers and processes a script started) and
 * exits with 130 or 143. Returns the function that removes the handlers once the script is done.
 */
export function cleanUpOnSignal(cleanup: () => Promise<unknown>): () => void {
  let stopping = false;
  // Ctrl-C reaches the process twice under tsx (the terminal's and the one tsx relays): the second
  // must not end the process before the clean-up has stopped what it started.
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    void cleanup().finally(() => process.exit(128 + (signal === 'SIGINT' ? 2 : 15)));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}
