import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';

/** One non-blank line of an NDJSON file: its 1-based number, and its value or why it is not JSON. */
export interface JsonLine {
  readonly line: number;
  readonly value: unknown;
  readonly error: Error | undefined;
}

/** Reads an NDJSON file (a path) or stream line by line (a UTF-8 byte-order mark on the first line is dropped). */
export async function* readJsonLines(source: string | Readable): AsyncGenerator<JsonLine> {
  const lines = createInterface({ input: typeof source === 'string' ? createReadStream(source) : source, crlfDelay: Infinity });
  let line = 0;
  for await (const text of lines) {
    line += 1;
    if (text.trim() === '') continue;
    try {
      yield { line, value: JSON.parse(line === 1 ? text.replace(/^\uFEFF/, '') : text) as unknown, error: undefined };
    } catch (error) {
      yield { line, value: undefined, error: error as Error };
    }
  }
}
