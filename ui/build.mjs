// Builds the UI into internal/ui/dist, which the Go binary embeds. The
// output must be byte-for-byte reproducible: scripts/check-generated.sh
// rebuilds it and fails when the committed copy differs.
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';

const out = new URL('../internal/ui/dist/', import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ['src/main.ts'],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  outfile: out + 'app.js',
  legalComments: 'none',
  logLevel: 'warning',
});
copyFileSync('src/index.html', out + 'index.html');
copyFileSync('src/style.css', out + 'style.css');
