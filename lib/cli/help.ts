/** Help texts of the `vendor-throttle` command; docs/cli.md has the long form. */

export const MAIN_HELP = `vendor-throttle — send batches of HTTP requests under a vendor's per-user rate limits

Usage:
  vendor-throttle run [options] <requests.ndjson|requests.csv|->
  vendor-throttle inspect --redis <url> [options] [key]
  vendor-throttle help [run|inspect]
  vendor-throttle --version

Commands:
  run       send every request of a file (or of standard input: -) through the throttle, write
            one result line per request
  inspect   show a key's usage per rule, next free slot and pause, or the busiest keys

Run 'vendor-throttle <command> --help' for the options of a command. Docs: docs/cli.md.
`;

export const RUN_HELP = `Usage: vendor-throttle run [options] <file>
       jq -c … | vendor-throttle run [options] -

Sends every request of <file> (NDJSON: one JSON object per line; CSV: a header row), or of
standard input for '-', through the throttle, and writes one result per request as NDJSON. Every
request is read and checked first: nothing is sent when one is bad. Fields/columns: url
(required), method, headers (JSON object), body, key, id (default: the line number), cost (slots
the request takes, default 1).

Limits:
  -r, --rule <rule>        a limit per key, e.g. 30/min, 5/s, 10000/day, 20/500ms, '4 concurrent' (repeatable; required);
                           KEY=<rule> (e.g. app=1000/min): a limit of the key KEY alone, instead of the others
  -k, --key <template>     the throttle key of each request (default: its 'key' field):
                             {user_id}, acme-{account}   fields of the request
                             header:x-user               a request header
                             query:user                  a query parameter of the URL
                             path:2                      the 2nd segment of the URL path
                           again: more keys each request counts in, e.g. --key '{user_id}' --key app
                           with --rule 30/min --rule app=1000/min (per user and app-wide)
      --redis <url>        share the limits through Redis (redis://, rediss://) with other processes
                           and machines, and with earlier runs (default: in memory, this run only)
      --cluster            <url> is a node of a Redis Cluster
      --hash-tag key|name  the RedisStore hashTag of the services sharing the limits (default: key);
                           name: every key of the throttle in one slot (several --key on a Cluster)
      --name <name>        the throttle name (namespace of the limits) (default: default)
      --prefix <prefix>    the Redis key prefix (default: vt)
      --mode wait          the only mode (the default): waits for each slot, exact at the vendor

Sending:
  -c, --concurrency <n>    requests under way at once, per process (default: 16)
  -w, --workers <n>        worker processes; a key's requests all go to one worker (default: 1)
      --retries <n>        attempts after a 429, a 5xx or a network error, each through the
                           throttle again (default: 2)
      --fallback-pause-ms <ms>
                           the pause of a key after a 429 that does not say how long (no
                           Retry-After), and the wait before a retry after a 5xx or a network
                           error, doubled each time (default: 1000)
      --timeout-ms <ms>    per attempt, from sending to the end of the body (default: 30000)
      --max-delay-ms <ms>  longest wait of an attempt for its slot, a vendor's pause included
                           (default: no limit); a request that would wait longer is not sent: its
                           result says "refused", it counts as failed, --resume sends it again
      --base-url <url>     resolve relative request URLs against it
  -H, --header <h>         'Name: value' added to every request (repeatable; a request's own wins)
      --format <f>         ndjson or csv (default: from the file name, .csv is CSV; ndjson for -)

Results:
  -o, --out <file>         results file (default: standard output); one JSON line per request:
                           {"id","key","status","startedAt","ms","attempts","body"|"error"},
                           and "refused","retryAfterMs" for an attempt refused by --max-delay-ms
      --resume             go on with an earlier run: skip the ids <file> of --out already holds,
                           but send those refused by --max-delay-ms again (with -: pipe the same
                           input)
      --overwrite          replace an existing results file (without it, a non-empty one is refused)
      --no-body            leave response bodies out of the results
  -q, --quiet              no progress and no summary on stderr (errors and deprecations still)
  -h, --help               this help

Flags have the names of the library's options (--max-delay-ms is maxDelayMs): a bare number is
ms, as there; a unit may be given instead: 500ms, 30s, 2m, 1h. Old spellings, read until the next
minor version with a deprecation line: --max-wait, --timeout, --retry-delay.
Ctrl-C (SIGINT) or SIGTERM: no new requests; those in flight finish and are written; exit 130.
A second one cancels those in flight (written as interrupted). Then: --resume.
Exit codes: 0 all ok, 1 some failed (no answer, status >= 400, or refused by --max-delay-ms), 2 bad
flags or input (nothing sent), 3 the run could not go on (Redis, a worker, the results file),
130 interrupted.

Example:
  vendor-throttle run --rule 30/min --rule 10000/day --key '{customer_id}' \\
    --redis redis://127.0.0.1:6379 --name acme --out results.ndjson customers.csv
`;

export const INSPECT_HELP = `Usage: vendor-throttle inspect --redis <url> [options] [key]

With a key: its usage per rule, next free slot, pause, and calls booked but not completed.
Without: the busiest keys of the namespace, found with SCAN (never KEYS; every master of a
Cluster), ranked by current usage.

Options:
      --redis <url>        the Redis the throttles share (required)
      --cluster            <url> is a node of a Redis Cluster
      --hash-tag key|name  the RedisStore hashTag the throttle's keys were written with (default: key)
      --name <name>        the throttle name (default: default)
      --prefix <prefix>    the Redis key prefix (default: vt)
  -r, --rule <rule>        the key's rules, as the throttle has them (repeatable; KEY=<rule> for one
                           key alone); without them only the calls logged, the pause and the calls
                           not completed are shown
      --top <n>            how many of the busiest keys to show (default: 10)
      --json               JSON output
  -h, --help               this help

Example:
  vendor-throttle inspect --redis redis://127.0.0.1:6379 --name acme --rule 30/min cus_42
`;
