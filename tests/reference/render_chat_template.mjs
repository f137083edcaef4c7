// The chat template reference for tests/e2e/test_chat_template_vs_js.cpp: @huggingface/jinja
// (what transformers.js renders chat templates with) rendering TEMPLATE (a file) with each
// variable set of CASES (a JSON array of objects); prints a JSON array holding, per case, the
// text or {"error": message}.
//
//   node render_chat_template.mjs JINJA_PACKAGE_DIR TEMPLATE CASES
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [pkg, templatePath, casesPath] = process.argv.slice(2);
const { Template } = await import(pathToFileURL(join(pkg, "dist", "index.js")).href);
const template = new Template(readFileSync(templatePath, "utf8"));
const out = JSON.parse(readFileSync(casesPath, "utf8")).map((variables) => {
  try {
    return template.render(variables);
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(out));
