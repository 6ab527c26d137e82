import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkSnippets, extractSnippets, formatDiagnostic, type Snippet, type SnippetCheck } from './support/doc-snippets.js';

const root = fileURLToPath(new URL('..', import.meta.url));
/** Ignored by git (`tmp/` in .gitignore); left in place after a run to inspect or `tsc -p` by hand. */
const outDir = path.join(root, 'tmp', 'doc-snippets');

/** README.md and every docs/*.md, in a stable order. */
function docFiles(): string[] {
  const docs = readdirSync(path.join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

/**
 * A block that must not compile: proves that the checker really sees the library's types (not `any`)
 * and places a message on the right Markdown line.
 */
const canary: Snippet = {
  doc: 'spec/docs.spec.ts canary',
  block: 1,
  line: 1,
  code: [
    "import { Throttle } from 'vendor-throttle';",
    "const throttled = new Throttle({ rules: ['30/min'] });",
    "await throttled.schedule('42', async () => 1, { priority: 'high' });",
  ].join('\n'),
  skipped: false,
};

describe('docs: every ```ts block of README.md and docs/*.md type-checks against the library', function () {
  this.timeout(60_000);

  let snippets: Snippet[] = [];
  let check: SnippetCheck;

  before(function () {
    snippets = docFiles().flatMap((doc) => extractSnippets(doc, readFileSync(path.join(root, doc), 'utf8')));
    check = checkSnippets([...snippets, canary], { root, outDir });
  });

  it('finds the blocks (README.md and docs/api.md both have some)', () => {
    const docs = new Set(snippets.map((snippet) => snippet.doc));
    expect([...docs]).to.include.members(['README.md', 'docs/api.md']);
    expect(snippets.filter((snippet) => !snippet.skipped).length).to.be.at.least(10);
  });

  it('compiles every block with no diagnostics', () => {
    const found = check.diagnostics.filter((diagnostic) => diagnostic.snippet !== canary);
    if (found.length > 0) {
      expect.fail(`${found.length} diagnostic(s) in documentation code blocks:\n${found.map(formatDiagnostic).join('\n')}`);
    }
  });

  it('reports a broken block with its file, line and error (canary)', () => {
    const found = check.diagnostics.filter((diagnostic) => diagnostic.snippet === canary).map(formatDiagnostic);
    expect(found).to.have.length(1);
    expect(found[0]).to.match(/^spec\/docs\.spec\.ts canary:3 \(block 1\): TS2322 Type 'string' is not assignable to type 'number'/);
  });
});
