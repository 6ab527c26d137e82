import { createHash } from 'node:crypto';
import { ThrottleConfigError } from './errors.js';
import { describe } from './rules.js';
import { argumentOf } from './validate.js';

/** What `schedule()` accepts as a key: a user id as string or number. */
export type KeyInput = string | number;

/** One key, or several a call counts in at once (a user's and an app-wide one): `schedule()` and the adapters' `key`. */
export type KeysInput = KeyInput | readonly KeyInput[];

/** Encoded ids longer than this are replaced by a SHA-256 digest, so a 10 kB id costs 70 bytes of key. */
const MAX_PLAIN_LENGTH = 200;

/**
 * Turns a user key into the string a store uses. Numbers become their decimal text (`42` and `'42'`
 * are the same user). Throws `ThrottleConfigError` for anything else, the empty string included (an id that
 * is empty is almost always a missing one: every such call would share one key).
 */
export function normalizeKey(key: unknown): string {
  if (key === '') throw new ThrottleConfigError("Expected key to be a non-empty string or a finite number, got ''", 'key');
  if (typeof key === 'string') return key;
  if (typeof key === 'number' && Number.isFinite(key)) return String(key);
  throw new ThrottleConfigError(`Expected key to be a string or a finite number, got ${describe(key)}`, 'key');
}

/**
 * Encodes a user key for a storage key so that no two ids share state (injective up to the
 * SHA-256 digest used for very long ids, where a collision is computationally out of reach):
 * - well-formed text is percent-encoded (`{`, `}`, `:`, `%`, spaces, newlines and non-ASCII all escaped),
 *   which leaves no `:` in it;
 * - text with lone surrogates (which UTF-8 cannot carry) becomes `u:` + hex of its UTF-16 code units;
 * - a result longer than 200 characters becomes `h:` + base64url SHA-256 of the text above;
 * - the empty key becomes `u:` (no code units): an empty hash tag `{}` is no hash tag to Redis
 *   Cluster, which would scatter the key's keys over different slots.
 * The output never holds `{` or `}`, so it cannot change a Redis Cluster hash tag.
 */
export function encodeKey(key: string): string {
  if (key === '') return 'u:';
  const plain = key.isWellFormed() ? encodeURIComponent(key) : `u:${utf16Hex(key)}`;
  if (plain.length <= MAX_PLAIN_LENGTH) return plain;
  return `h:${createHash('sha256').update(plain).digest('base64url')}`;
}

function utf16Hex(text: string): string {
  let out = '';
  for (let i = 0; i < text.length; i++) out += text.charCodeAt(i).toString(16).padStart(4, '0');
  return out;
}

/**
 * The storage keys of one throttled user key (lua/includes/log.lua). Both carry the same hash tag,
 * so that one script can reach them on a Cluster; keys of several users can be reached by one
 * script on a standalone Redis, or on a Cluster when their tags are made to share a slot.
 */
export interface KeyNames {
  /** Sorted set: one member per slot, scored by its release (a bound while its call may be in flight). */
  readonly log: string;
  /** Hash: `pause` (no start before), `w` (a decision waits for a completion), bucket counts. */
  readonly meta: string;
}

const NAME = /^[A-Za-z0-9._\-/]{1,100}$/;

/** Checks a namespace or prefix part: printable, no hash-tag braces, no separators that could forge keys. */
export function checkNamespace(what: string, value: unknown): string {
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw new ThrottleConfigError(`Expected ${what} to be 1-100 characters of letters, digits, '.', '_', '-' or '/', got ${describe(value)}`, argumentOf(what));
  }
  return value;
}

/**
 * Which part of a key's Redis keys is their hash tag (a Redis Cluster puts keys with one tag in one
 * slot): `'key'`, the user key (`<prefix>:<name>:{<encoded key>}:<part>`), spreads keys over the
 * Cluster; `'name'`, the throttle's name (`<prefix>:<name>:{<name>}:<encoded key>:<part>`), puts every
 * key of a throttle in one slot, which a call of several keys needs on a Cluster.
 */
export type HashTag = 'key' | 'name';

/**
 * Builds every Redis key of one decision. The hash tag (the encoded key, or the throttle's name:
 * see {@link HashTag}) puts all parts in one Cluster slot.
 */
export function keyNames(prefix: string, name: string, encodedKey: string, hashTag: HashTag = 'key'): KeyNames {
  const { head, log, meta } = keyNameParts(prefix, name, hashTag);
  return { log: `${head}${encodedKey}${log}`, meta: `${head}${encodedKey}${meta}` };
}

/**
 * What surrounds the encoded key in each Redis key of a namespace ({@link keyNames}): a key's log is
 * `head + encoded key + log`, its meta `head + encoded key + meta`.
 */
export interface KeyNameParts {
  readonly head: string;
  readonly log: string;
  readonly meta: string;
}

export function keyNameParts(prefix: string, name: string, hashTag: HashTag = 'key'): KeyNameParts {
  return hashTag === 'key'
    ? { head: `${prefix}:${name}:{`, log: '}:log', meta: '}:meta' }
    : { head: `${prefix}:${name}:{${name}}:`, log: ':log', meta: ':meta' };
}

/**
 * Every Redis name one store uses, per namespace: the keys of a user key, the namespace's index of
 * kept keys and its mark, its liveness stamps, its channels, and this process's members.
 */
export class RedisNames {
  readonly prefix: string;
  readonly hashTag: HashTag;
  /** Suffix of this process's members, `<number><tag>`: unique across processes without a counter in Redis. */
  readonly tag: string;
  readonly #cluster: boolean;
  readonly #parts = new Map<string, KeyNameParts>();

  constructor(prefix: string, hashTag: HashTag, tag: string, cluster: boolean) {
    this.prefix = prefix;
    this.hashTag = hashTag;
    this.tag = tag;
    this.#cluster = cluster;
  }

  /** The log and meta of a user key. */
  of(namespace: string, key: string): KeyNames {
    return keyNames(this.prefix, namespace, key, this.hashTag);
  }

  /** What surrounds an encoded key in the namespace's Redis keys, kept per namespace. */
  parts(namespace: string): KeyNameParts {
    let parts = this.#parts.get(namespace);
    if (parts === undefined) this.#parts.set(namespace, (parts = keyNameParts(this.prefix, namespace, this.hashTag)));
    return parts;
  }

  /**
   * The namespace's index of kept keys and its mark, as the last keys of a script
   * (lua/includes/log.lua, "Key lifetimes" and `VT_MARK`); none on a Cluster, where a script
   * reaches one slot.
   */
  kept(namespace: string): string[] {
    return this.#cluster ? [] : [`${this.prefix}:${namespace}:kept`, `${this.prefix}:${namespace}:mark`];
  }

  /** The namespace's liveness stamps (lua/alive.lua). */
  alive(namespace: string): string {
    return `${this.prefix}:${namespace}:alive`;
  }

  /** The namespace's channel prefix of completions, as the batch script takes it. */
  channel(namespace: string): string {
    return `${this.prefix}:${namespace}:free`;
  }

  /** This process's channel of completions in the namespace. */
  wakes(namespace: string): string {
    return `${this.channel(namespace)}${this.tag}`;
  }

  /** The namespace's channel of vendor pauses (lua/pause.lua). */
  pauses(namespace: string): string {
    return `${this.prefix}:${namespace}:paused`;
  }

  member(number: number): string {
    return `${number}${this.tag}`;
  }

  /** The number of this process's `member`, or undefined for a member of another. */
  numberOf(member: string): number | undefined {
    return member.endsWith(this.tag) ? Number.parseInt(member, 10) : undefined;
  }
}
