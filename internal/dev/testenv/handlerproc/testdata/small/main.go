// Command small is the smallest main package, which the build tests compile
// in place of the handler.
package main

func main() {}
