// Build step after tsc: copies the Lua scripts next to the compiled store, where
// lib/stores/redis-scripts.ts looks for them, and makes the `vendor-throttle` command executable
// (package.json `bin`; tsc keeps the `#!/usr/bin/env node` line of lib/cli/main.ts).
import { chmodSync, cpSync, readFileSync } from 'node:fs';

cpSync(new URL('../lib/lua', import.meta.url), new URL('../dist/lua', import.meta.url), { recursive: true });

const bin = new URL('../dist/cli/main.js', import.meta.url);
if (!readFileSync(bin, 'utf8').startsWith('#!/usr/bin/env node\n')) throw new Error('dist/cli/main.js lost its #!/usr/bin/env node line');
chmodSync(bin, 0o755);
