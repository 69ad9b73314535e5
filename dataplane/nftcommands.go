package dataplane

import (
	"fmt"
	"reflect"

	"sigs.k8s.io/knftables"

	"github.com/kpsim/kpsim/internal/private"
)

// NFTCommand is one command of an nftables transaction.
type NFTCommand struct {
	Verb string // add, create, insert, replace, delete, destroy, flush, reset
	Obj  knftables.Object
}

// NFTCommands reads a transaction's commands. knftables keeps them
// unexported (only its own fake reads them); they are read here through
// package private, and a knftables whose Transaction differs fails here rather
// than being misread. err is also the error the transaction was built
// with, if any: cmds are then the commands before it.
func NFTCommands(tx *knftables.Transaction) (cmds []NFTCommand, err error) {
	v := reflect.ValueOf(tx).Elem()
	txFields, err := private.Fields(v.Type(), "err", "operations")
	if err != nil {
		return nil, fmt.Errorf("knftables: %w: not the knftables this kernel knows", err)
	}
	list := private.Open(v.FieldByIndex(txFields[1].Index))
	opFields, err := private.Fields(list.Type().Elem(), "verb", "obj") // found once, not at each command
	if err != nil {
		return nil, fmt.Errorf("knftables: %w: not the knftables this kernel knows", err)
	}
	cmds = make([]NFTCommand, list.Len())
	for i := range cmds {
		op := list.Index(i)
		cmds[i] = NFTCommand{private.Open(op.FieldByIndex(opFields[0].Index)).String(), private.Open(op.FieldByIndex(opFields[1].Index)).Interface().(knftables.Object)}
	}
	err, _ = private.Open(v.FieldByIndex(txFields[0].Index)).Interface().(error)
	return cmds, err
}
