// Copies the Lua scripts next to the compiled store, where lib/stores/redis-scripts.ts looks for them.
import { cpSync } from 'node:fs';

cpSync(new URL('../lib/lua', import.meta.url), new URL('../dist/lua', import.meta.url), { recursive: true });
