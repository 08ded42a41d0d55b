package txn

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

var errPatch = errors.New("patch does not apply")

// applyPatch returns a copy of doc with ops applied, as Cosmos DB applies
// them: set creates or overwrites the last property (or sets an existing
// array index); add inserts (a property, or at an array index, "-"
// appending); replace and remove need the value to exist; incr adds to a
// number (a missing property takes the increment). Parents must exist.
func applyPatch(doc map[string]any, ops []PatchOp) (map[string]any, error) {
	out, _ := deepCopy(doc).(map[string]any)
	for _, op := range ops {
		segs := strings.Split(op.Path[1:], "/")
		for i, s := range segs {
			segs[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
		}
		var v any
		if op.Op != PatchRemove {
			if err := decodeNumbers(op.Value, &v); err != nil {
				return nil, errPatch
			}
		}
		if err := patchOne(out, segs, op.Op, v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// walk follows segs through objects and arrays.
func walk(doc any, segs []string) (any, bool) {
	cur := doc
	for _, s := range segs {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[s]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// patchOne applies one operation at segs; containers are changed in place
// (out is a private deep copy).
func patchOne(out map[string]any, segs []string, op string, v any) error {
	parentSegs, key := segs[:len(segs)-1], segs[len(segs)-1]
	p, ok := walk(out, parentSegs)
	if !ok {
		return errPatch
	}
	switch c := p.(type) {
	case map[string]any:
		old, exists := c[key]
		switch op {
		case PatchSet, PatchAdd:
			c[key] = v
		case PatchReplace:
			if !exists {
				return errPatch
			}
			c[key] = v
		case PatchRemove:
			if !exists {
				return errPatch
			}
			delete(c, key)
		case PatchIncrement:
			n, err := increment(old, exists, v)
			if err != nil {
				return err
			}
			c[key] = n
		default:
			return errPatch
		}
		return nil
	case []any:
		return patchArray(out, parentSegs, c, key, op, v)
	}
	return errPatch
}

func patchArray(out map[string]any, parentSegs []string, arr []any, key, op string, v any) error {
	i, err := strconv.Atoi(key)
	if op == PatchAdd && key == "-" {
		i, err = len(arr), nil
	}
	if err != nil || i < 0 {
		return errPatch
	}
	switch op {
	case PatchAdd:
		if i > len(arr) {
			return errPatch
		}
		arr = append(arr[:i], append([]any{v}, arr[i:]...)...)
	case PatchSet, PatchReplace:
		if i >= len(arr) {
			return errPatch
		}
		arr[i] = v
	case PatchRemove:
		if i >= len(arr) {
			return errPatch
		}
		arr = append(arr[:i], arr[i+1:]...)
	case PatchIncrement:
		if i >= len(arr) {
			return errPatch
		}
		n, err := increment(arr[i], true, v)
		if err != nil {
			return err
		}
		arr[i] = n
	default:
		return errPatch
	}
	// Store the (possibly reallocated) array back in its parent.
	gp, _ := walk(out, parentSegs[:len(parentSegs)-1])
	last := parentSegs[len(parentSegs)-1]
	switch g := gp.(type) {
	case map[string]any:
		g[last] = arr
	case []any:
		j, _ := strconv.Atoi(last)
		g[j] = arr
	}
	return nil
}

// increment adds by (an integer) to old, a number or absent.
func increment(old any, exists bool, by any) (any, error) {
	b, ok := by.(json.Number)
	if !ok {
		return nil, errPatch
	}
	if !exists || old == nil {
		return b, nil
	}
	o, ok := old.(json.Number)
	if !ok {
		return nil, errPatch
	}
	oi, err1 := o.Int64()
	bi, err2 := b.Int64()
	if err1 == nil && err2 == nil && !(bi > 0 && oi > math.MaxInt64-bi) && !(bi < 0 && oi < math.MinInt64-bi) {
		return json.Number(strconv.FormatInt(oi+bi, 10)), nil
	}
	of, _ := o.Float64()
	bf, _ := b.Float64()
	return json.Number(strconv.FormatFloat(of+bf, 'g', -1, 64)), nil
}

func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, x := range c {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		a := make([]any, len(c))
		for i, x := range c {
			a[i] = deepCopy(x)
		}
		return a
	}
	return v
}

// PatchDocument applies ops to the JSON object doc as Cosmos DB applies a
// patch (see Store's patch semantics) and returns the patched object,
// system properties included; a server that stands in for Cosmos DB
// answers a patch with it. An error means Cosmos DB would refuse the patch
// with 400.
func PatchDocument(doc []byte, ops []PatchOp) ([]byte, error) {
	var obj map[string]any
	if err := decodeNumbers(doc, &obj); err != nil || obj == nil {
		return nil, errPatch
	}
	out, err := applyPatch(obj, ops)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}
