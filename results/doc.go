// Package results reads and writes the results file, one self-describing
// JSON document per run whose types are package record's, and summarizes
// it (the statistics every reader recomputes, the figures, and the text
// that ends a run). Reports (results/report) and comparisons
// (results/compare) read it from packages of their own. The proxier
// records its syncs in record's types and imports neither this package
// nor its readers' charting and statistics libraries. A report or a
// comparison never re-runs anything; whatever it shows can be recomputed
// from the file.
package results
