package handlerproc

// BuildPackage is Build for any main package, for the build tests.
var BuildPackage = buildPackage
