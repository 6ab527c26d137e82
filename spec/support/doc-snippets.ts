import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/** One ```ts block of a Markdown file. */
export interface Snippet {
  /** The Markdown file, relative to the repository root (`README.md`, `docs/api.md`). */
  readonly doc: string;
  /** 1-based number of the block among the file's ```ts blocks. */
  readonly block: number;
  /** 1-based line, in the Markdown file, of the block's first code line. */
  readonly line: number;
  readonly code: string;
  /** The block starts with `// not compiled`: intentionally partial, not type-checked. */
  readonly skipped: boolean;
}

/** A compiler message, placed in the Markdown file it comes from. */
export interface SnippetDiagnostic {
  /** The block, or `undefined` for a message about the set-up (tsconfig, prelude, library). */
  readonly snippet: Snippet | undefined;
  /** `README.md:57 (block 3)`, or a file path for messages outside the blocks. */
  readonly where: string;
  readonly code: number;
  readonly message: string;
}

export interface SnippetCheck {
  /** The module written for each compiled block (absolute path). */
  readonly files: ReadonlyMap<Snippet, string>;
  /** Names the prelude had to provide to each compiled block. */
  readonly provided: ReadonlyMap<Snippet, readonly string[]>;
  readonly diagnostics: readonly SnippetDiagnostic[];
}

const FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^\s`]*)/;
const OPT_OUT = /^\s*\/\/\s*not compiled\b/;

/** The ```ts (or ```typescript) blocks of a Markdown text, in order. */
export function extractSnippets(doc: string, markdown: string): Snippet[] {
  const lines = markdown.split(/\r?\n/);
  const snippets: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open as unknown as [string, string, string, string];
    const close = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`);
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !close.test(lines[j]!); j++) {
      const text = lines[j]!;
      body.push(text.startsWith(indent) ? text.slice(indent.length) : text.trimStart());
    }
    if (info === 'ts' || info === 'typescript') {
      const code = body.join('\n');
      snippets.push({ doc, block: snippets.length + 1, line: i + 2, code, skipped: OPT_OUT.test(body[0] ?? '') });
    }
    i = j;
  }
  return snippets;
}

/**
 * Declarations of the free names examples may use without defining them. A block gets only the
 * ones it mentions and does not declare itself.
 */
export const PRELUDE: Readonly<Record<string, string>> = {
  userId: 'declare const userId: string;',
  acme: 'declare const acme: { get(path: string): Promise<unknown> };',
  call: 'declare const call: () => Promise<unknown>;',
  store: "declare const store: import('vendor-throttle').Store;",
  throttle: "declare const throttle: import('vendor-throttle').Throttle;",
  redis: "declare const redis: import('ioredis').Redis;",
  plans: "declare const plans: { planOf(userId: string): Promise<'free' | 'pro'> };",
  // An @upstash/qstash Client, as far as the examples use it.
  qstash: 'declare const qstash: { publishJSON(request: { url: string; body: unknown; notBefore?: number }): Promise<{ messageId: string }> };',
};

/** The value and type names `lib/index.ts` exports: a block may use them without importing them. */
export function libraryExports(indexFile: string): { values: string[]; types: string[] } {
  const source = ts.createSourceFile(indexFile, readFileSync(indexFile, 'utf8'), ts.ScriptTarget.Latest);
  const values: string[] = [];
  const types: string[] = [];
  for (const statement of source.statements) {
    if (!ts.isExportDeclaration(statement) || !statement.exportClause || !ts.isNamedExports(statement.exportClause)) continue;
    for (const element of statement.exportClause.elements) {
      (statement.isTypeOnly || element.isTypeOnly ? types : values).push(element.name.text);
    }
  }
  return { values, types };
}

/** Names a block declares at its top level (imports, variables, functions, classes, types). */
function declaredNames(source: ts.SourceFile): Set<string> {
  const names = new Set<string>();
  const addBinding = (name: ts.BindingName): void => {
    if (ts.isIdentifier(name)) names.add(name.text);
    else for (const element of name.elements) if (!ts.isOmittedExpression(element)) addBinding(element.name);
  };
  for (const statement of source.statements) {
    if (ts.isImportDeclaration(statement) && statement.importClause) {
      const { name, namedBindings } = statement.importClause;
      if (name) names.add(name.text);
      if (namedBindings && ts.isNamespaceImport(namedBindings)) names.add(namedBindings.name.text);
      if (namedBindings && ts.isNamedImports(namedBindings)) for (const element of namedBindings.elements) names.add(element.name.text);
    } else if (ts.isImportEqualsDeclaration(statement)) {
      names.add(statement.name.text);
    } else if (ts.isVariableStatement(statement)) {
      for (const declaration of statement.declarationList.declarations) addBinding(declaration.name);
    } else if (
      (ts.isFunctionDeclaration(statement) ||
        ts.isClassDeclaration(statement) ||
        ts.isInterfaceDeclaration(statement) ||
        ts.isTypeAliasDeclaration(statement) ||
        ts.isEnumDeclaration(statement) ||
        ts.isModuleDeclaration(statement)) &&
      statement.name &&
      ts.isIdentifier(statement.name)
    ) {
      names.add(statement.name.text);
    }
  }
  return names;
}

/** Whether an identifier names a property or member rather than referring to a variable or type. */
function isMemberName(node: ts.Identifier): boolean {
  const parent = node.parent;
  if (ts.isPropertyAccessExpression(parent)) return parent.name === node;
  if (ts.isQualifiedName(parent)) return parent.right === node;
  if (ts.isBindingElement(parent) || ts.isImportSpecifier(parent) || ts.isExportSpecifier(parent)) return parent.propertyName === node;
  return (
    (ts.isPropertyAssignment(parent) ||
      ts.isPropertySignature(parent) ||
      ts.isPropertyDeclaration(parent) ||
      ts.isMethodDeclaration(parent) ||
      ts.isMethodSignature(parent) ||
      ts.isGetAccessor(parent) ||
      ts.isSetAccessor(parent)) &&
    parent.name === node
  );
}

/** The identifiers a block refers to (a superset of its free names: enough to pick prelude lines). */
function mentionedNames(source: ts.SourceFile): Set<string> {
  const names = new Set<string>();
  const visit = (node: ts.Node): void => {
    if (ts.isIdentifier(node) && !isMemberName(node)) names.add(node.text);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return names;
}

export interface CheckOptions {
  /** Repository root: holds `tsconfig.json` and `lib/index.ts`. */
  readonly root: string;
  /** Directory the modules are written to; emptied first. Must be ignored by git. */
  readonly outDir: string;
}

/**
 * Writes each block as its own module (prelude + block) to `outDir`, with a tsconfig that extends the
 * repository's and maps `vendor-throttle` to `lib/index.ts` (and `vendor-throttle/bullmq` to its module), then type-checks them all in one program.
 */
export function checkSnippets(snippets: readonly Snippet[], { root, outDir }: CheckOptions): SnippetCheck {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const relative = (to: string) => path.relative(outDir, to).split(path.sep).join('/');
  const library = libraryExports(path.join(root, 'lib/index.ts'));

  const files = new Map<Snippet, string>();
  const provided = new Map<Snippet, string[]>();
  const byFile = new Map<string, { snippet: Snippet; preludeLines: number }>();
  for (const snippet of snippets) {
    if (snippet.skipped) continue;
    const parsed = ts.createSourceFile('block.ts', snippet.code, ts.ScriptTarget.Latest, true);
    const declared = declaredNames(parsed);
    const mentioned = mentionedNames(parsed);
    const wanted = (name: string) => mentioned.has(name) && !declared.has(name);
    const values = library.values.filter(wanted);
    const types = library.types.filter(wanted);
    const declarations = Object.keys(PRELUDE).filter(wanted);
    const prelude = [
      `// Generated by spec/docs.spec.ts from ${snippet.doc}, block ${snippet.block} (line ${snippet.line}). Do not edit.`,
      ...(values.length > 0 ? [`import { ${values.join(', ')} } from 'vendor-throttle';`] : []),
      ...(types.length > 0 ? [`import type { ${types.join(', ')} } from 'vendor-throttle';`] : []),
      ...declarations.map((name) => PRELUDE[name]!),
      'export {};',
    ];
    const slug = snippet.doc
      .replace(/\.md$/i, '')
      .replace(/[^A-Za-z0-9]+/g, '-')
      .toLowerCase();
    const file = path.join(outDir, `${slug}-${String(snippet.block).padStart(2, '0')}.ts`);
    writeFileSync(file, `${prelude.join('\n')}\n${snippet.code}\n`);
    files.set(snippet, file);
    provided.set(snippet, [...values, ...types, ...declarations]);
    byFile.set(path.resolve(file), { snippet, preludeLines: prelude.length });
  }

  const tsconfigPath = path.join(outDir, 'tsconfig.json');
  const tsconfig = {
    extends: relative(path.join(root, 'tsconfig.json')),
    compilerOptions: {
      noEmit: true,
      declaration: false,
      sourceMap: false,
      types: ['node'],
      paths: {
        'vendor-throttle': [relative(path.join(root, 'lib/index.ts'))],
        'vendor-throttle/bullmq': [relative(path.join(root, 'lib/adapters/bullmq.ts'))],
      },
    },
    include: ['*.ts'],
  };
  writeFileSync(tsconfigPath, `${JSON.stringify(tsconfig, null, 2)}\n`);

  const diagnostics: SnippetDiagnostic[] = [];
  const place = (diagnostic: ts.Diagnostic): SnippetDiagnostic => {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    const { file, start } = diagnostic;
    if (!file || start === undefined) return { snippet: undefined, where: relative(tsconfigPath), code: diagnostic.code, message };
    const { line, character } = file.getLineAndCharacterOfPosition(start);
    const origin = byFile.get(path.resolve(file.fileName));
    if (!origin || line < origin.preludeLines) {
      const where = `${path.relative(root, file.fileName)}:${line + 1}:${character + 1}${origin ? ' (prelude)' : ''}`;
      return { snippet: origin?.snippet, where, code: diagnostic.code, message };
    }
    const { snippet } = origin;
    return { snippet, where: `${snippet.doc}:${snippet.line + line - origin.preludeLines} (block ${snippet.block})`, code: diagnostic.code, message };
  };

  if (files.size === 0) return { files, provided, diagnostics };
  const config = ts.readConfigFile(tsconfigPath, (file) => ts.sys.readFile(file));
  if (config.error) return { files, provided, diagnostics: [place(config.error)] };
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, outDir, undefined, tsconfigPath);
  diagnostics.push(...parsed.errors.map(place));
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
  diagnostics.push(...program.getOptionsDiagnostics().map(place), ...program.getGlobalDiagnostics().map(place));
  for (const file of files.values()) {
    const source = program.getSourceFile(file);
    if (!source) {
      diagnostics.push({ snippet: undefined, where: relative(file), code: 0, message: 'not part of the program' });
      continue;
    }
    diagnostics.push(...program.getSyntacticDiagnostics(source).map(place), ...program.getSemanticDiagnostics(source).map(place));
  }
  return { files, provided, diagnostics };
}

/** `README.md:57 (block 3): TS2304 Cannot find name 'x'.` */
export function formatDiagnostic(diagnostic: SnippetDiagnostic): string {
  return `${diagnostic.where}: TS${diagnostic.code} ${diagnostic.message}`;
}
