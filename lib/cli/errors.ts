/**
 * Exit codes of the `vendor-throttle` command (docs/cli.md lists them):
 * - `ok`: every request has a result and none failed;
 * - `failed`: every request has a result, some failed (no response, or a status of 400 or more, after retries);
 * - `usage`: bad flags (a `ThrottleConfigError`), a bad input or results file: nothing was sent;
 * - `fatal`: the run could not go on (Redis unreachable or failing, a worker died, the results file
 *   could not be written); what was done is in the results file, `--resume` goes on from there;
 * - `interrupted`: stopped by SIGINT or SIGTERM; same as `fatal` for what is recorded.
 */
export const EXIT = { ok: 0, failed: 1, usage: 2, fatal: 3, interrupted: 130 } as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/**
 * A failure of the command that is not a bad argument (those are the library's
 * `ThrottleConfigError`, whose `argument` names the flag, exit 2): a bad line of the input or of the
 * results file to resume (exit 2), Redis unreachable, a worker that died, results that cannot be
 * written (exit 3). Reported as one message on stderr (no stack), with the exit code it ends with.
 */
export class CliError extends Error {
  readonly exitCode: ExitCode;

  constructor(message: string, exitCode: ExitCode = EXIT.usage) {
    super(message);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

/** One line for any error: its message and, for a fetch failure, the cause's (`connect ECONNREFUSED …`). */
export function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error && error.cause.message !== error.message ? `: ${error.cause.message}` : '';
  return `${error.message}${cause}`;
}
