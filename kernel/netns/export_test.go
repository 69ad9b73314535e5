package netns

// newNamedNetns for the external tests: a crashed run's namespace.
var NewNamed = newNamedNetns
