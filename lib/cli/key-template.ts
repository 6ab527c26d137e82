import { ThrottleConfigError } from '../errors.js';

/** What a key is read from: the request's fields as given in the file, its URL and its headers. */
export interface KeySource {
  readonly fields: Readonly<Record<string, unknown>>;
  readonly url: URL;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
}

/** Reads one request's throttle key; throws an `Error` saying why there is none. */
export type KeyReader = (source: KeySource) => string;

const PLACEHOLDER = /\{([^{}]*)\}/g;

/**
 * Compiles `--key`:
 * - none: the request's `key` field;
 * - `header:<name>`: a request header;
 * - `query:<name>`: a query parameter of the URL;
 * - `path:<n>`: the n-th segment of the URL path (1 = first);
 * - anything else: a template whose `{field}` parts (`{user.id}` for nested NDJSON fields) are
 *   replaced by the request's fields: `{user_id}`, `acme-{account}-{user}`; no braces: one key for all.
 * Throws `ThrottleConfigError` (its `argument`: `--key`) for a template that cannot work.
 */
export function compileKey(template: string | undefined): KeyReader {
  if (template === undefined) {
    return ({ fields }) => {
      const key = fields.key;
      if (typeof key === 'number' && Number.isFinite(key)) return String(key);
      if (typeof key === 'string' && key !== '') return key;
      throw new Error(
        key === undefined || key === ''
          ? "no key: give each request a 'key' field, or pass --key"
          : `'key' must be a string or a number, got ${JSON.stringify(key)}`,
      );
    };
  }
  const [kind, ...rest] = template.split(':');
  const arg = rest.join(':');
  if (kind === 'header' && rest.length > 0) {
    const name = arg.trim().toLowerCase();
    if (name === '') throw new ThrottleConfigError(`--key '${template}': expected a header name after 'header:'`, '--key');
    return ({ headers }) => nonEmpty(headers[name], `no '${name}' header (--key ${template})`);
  }
  if (kind === 'query' && rest.length > 0) {
    if (arg === '') throw new ThrottleConfigError(`--key '${template}': expected a query parameter after 'query:'`, '--key');
    return ({ url }) => nonEmpty(url.searchParams.get(arg) ?? undefined, `no '${arg}' query parameter in the URL (--key ${template})`);
  }
  if (kind === 'path' && rest.length > 0) {
    const index = Number(arg);
    if (!/^\d+$/.test(arg) || index < 1) throw new ThrottleConfigError(`--key '${template}': expected a path segment number from 1 up after 'path:'`, '--key');
    return ({ url }) => {
      const segment = url.pathname.split('/').filter((part) => part !== '')[index - 1];
      return nonEmpty(segment === undefined ? undefined : safeDecode(segment), `the URL path has no segment ${index} (--key ${template})`);
    };
  }
  const stripped = template.replace(PLACEHOLDER, '');
  if (stripped.includes('{') || stripped.includes('}'))
    throw new ThrottleConfigError(`--key '${template}': unbalanced braces; write fields as {name}`, '--key');
  const names = [...template.matchAll(PLACEHOLDER)].map((match) => match[1]!.trim());
  if (names.some((name) => name === '')) throw new ThrottleConfigError(`--key '${template}': empty {} in the template; write fields as {name}`, '--key');
  if (names.length === 0) return () => template;
  return ({ fields }) =>
    template.replace(PLACEHOLDER, (_whole, name: string) => {
      const value = field(fields, name.trim());
      if (typeof value === 'number' || typeof value === 'boolean') return String(value);
      if (typeof value === 'string' && value !== '') return value;
      throw new Error(
        value === undefined || value === '' || value === null
          ? `no '${name.trim()}' field for --key ${template}`
          : `field '${name.trim()}' must be a string or a number for --key ${template}`,
      );
    });
}

/** `user.id` reads `fields.user.id`; a field whose name has a dot is found first. */
function field(fields: Readonly<Record<string, unknown>>, path: string): unknown {
  if (Object.hasOwn(fields, path)) return fields[path];
  let value: unknown = fields;
  for (const part of path.split('.')) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

function nonEmpty(value: string | undefined, why: string): string {
  if (value === undefined || value === '') throw new Error(why);
  return value;
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
