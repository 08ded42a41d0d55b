package cosmos

import "github.com/nimbus-go/functions-subscriber/internal/cosmos/cosmosid"

// ErrInvalidID reports a database or container id Cosmos DB would refuse.
var ErrInvalidID = cosmosid.ErrInvalid

// CheckID applies the Cosmos DB rule for resource ids (databases,
// containers): 1 to 255 UTF-16 code units, not blank, not ending with a
// space, none of / \ ? #. The error wraps ErrInvalidID.
func CheckID(id string) error { return cosmosid.Check(id) }
