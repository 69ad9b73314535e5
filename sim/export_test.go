package sim

// AddDump is addDump for the package's external tests.
var AddDump = addDump
