// Package archtest holds tests of the package graph: the pipeline and its
// ports depend on no Azure SDK, adapters never reach back into the
// pipeline or the composition, nothing imports the handler command, and the
// sample endpoint builds only on the public package nimbus.
package archtest
