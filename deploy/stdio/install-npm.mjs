// Install npm (and with it npx) from the npm registry into
// /usr/local/lib/node_modules/npm, the layout of Node.js's own tarballs.
// Debian's `npm` package would drag in about 350 packages of its own
// (webpack, babel, the OpenSSL headers, ...): 140 MB more in the image.
//
//   node install-npm.mjs VERSION INTEGRITY
//
// INTEGRITY is the registry's `dist.integrity` of that version (an SRI
// string, sha512-BASE64): a tarball that does not match is refused.
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync } from "node:fs";

const [version, integrity] = process.argv.slice(2);
if (!version || !integrity?.startsWith("sha512-")) {
  console.error("usage: node install-npm.mjs VERSION sha512-INTEGRITY");
  process.exit(2);
}
const url = `https://registry.npmjs.org/npm/-/npm-${version}.tgz`;
const response = await fetch(url);
if (!response.ok) {
  console.error(`install-npm: GET ${url}: ${response.status} ${response.statusText}`);
  process.exit(1);
}
const tarball = Buffer.from(await response.arrayBuffer());
const got = `sha512-${createHash("sha512").update(tarball).digest("base64")}`;
if (got !== integrity) {
  console.error(`install-npm: ${url} has integrity ${got}, expected ${integrity}`);
  process.exit(1);
}
const home = "/usr/local/lib/node_modules/npm";
mkdirSync(home, { recursive: true });
// The tarball's entries sit under package/.
execFileSync("tar", ["-xzf", "-", "--strip-components=1", "--no-same-owner", "-C", home], {
  input: tarball,
  stdio: ["pipe", "inherit", "inherit"],
});
mkdirSync("/usr/local/bin", { recursive: true });
symlinkSync(`${home}/bin/npm-cli.js`, "/usr/local/bin/npm");
symlinkSync(`${home}/bin/npx-cli.js`, "/usr/local/bin/npx");
console.log(`install-npm: npm ${version} in ${home}`);
