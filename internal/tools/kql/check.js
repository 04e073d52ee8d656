// check.js parses and analyzes Kusto queries with Microsoft's Kusto language service (the
// parser behind the Azure portal's query editors), pinned in package.json here. It reads JSON on
// stdin, {"tables": {"<name>": "(<column>:<type>, ...)"}, "queries": {"<name>": "<query>"}},
// and writes JSON on stdout: for each query, its diagnostics (severity, code, message, line),
// or an empty list when it parses and every name in it resolves against the tables given.
// The infra tests run it on the alert queries (infra/app/alerts/*.kql).
'use strict';

const fs = require('fs');
const path = require('path');

const lib = path.join(__dirname, 'node_modules', '@kusto', 'language-service-next');
require(path.join(lib, 'bridge.min.js'));
require(path.join(lib, 'Kusto.Language.Bridge.min.js'));
const K = globalThis.Kusto.Language;

const input = JSON.parse(fs.readFileSync(0, 'utf8'));
const tables = Object.entries(input.tables || {}).map(
  ([name, schema]) => new K.Symbols.TableSymbol.$ctor7(name, schema, null));
const globals = K.GlobalState.Default.WithDatabase(new K.Symbols.DatabaseSymbol.ctor('db', tables));

const out = {};
for (const [name, text] of Object.entries(input.queries || {})) {
  const code = K.KustoCode.ParseAndAnalyze(text, globals);
  const diags = code.GetDiagnostics();
  const list = [];
  for (let i = 0; i < diags.Count; i++) {
    const d = diags.getItem(i);
    list.push({
      severity: d.Severity,
      code: d.Code,
      message: d.Message,
      line: text.slice(0, d.Start).split('\n').length,
    });
  }
  out[name] = list;
}
process.stdout.write(JSON.stringify(out));
