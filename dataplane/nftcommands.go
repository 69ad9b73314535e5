package dataplane

import (
	"fmt"
	"reflect"
	"unsafe"

	"sigs.k8s.io/knftables"
)

// NFTCommand is one command of an nftables transaction.
type NFTCommand struct {
	Verb string // add, create, insert, replace, delete, destroy, flush, reset
	Obj  knftables.Object
}

// NFTCommands reads a transaction's commands. knftables keeps them
// unexported (only its own fake reads them); they are read here by
// reflection, and a knftables whose Transaction differs fails here rather
// than being misread. err is also the error the transaction was built
// with, if any: cmds are then the commands before it.
func NFTCommands(tx *knftables.Transaction) (cmds []NFTCommand, err error) {
	fields := func(t reflect.Type, names ...string) ([]reflect.StructField, error) {
		fs := make([]reflect.StructField, len(names))
		for i, name := range names {
			f, ok := t.FieldByName(name)
			if !ok {
				return nil, fmt.Errorf("knftables' %s has no field %s: not the knftables this kernel knows", t.Name(), name)
			}
			fs[i] = f
		}
		return fs, nil
	}
	// read makes an unexported field readable.
	read := func(v reflect.Value, f reflect.StructField) reflect.Value {
		return reflect.NewAt(f.Type, unsafe.Pointer(v.FieldByIndex(f.Index).UnsafeAddr())).Elem()
	}
	v := reflect.ValueOf(tx).Elem()
	txFields, err := fields(v.Type(), "err", "operations")
	if err != nil {
		return nil, err
	}
	list := read(v, txFields[1])
	opFields, err := fields(list.Type().Elem(), "verb", "obj") // found once, not at each command
	if err != nil {
		return nil, err
	}
	cmds = make([]NFTCommand, list.Len())
	for i := range cmds {
		op := list.Index(i)
		cmds[i] = NFTCommand{read(op, opFields[0]).String(), read(op, opFields[1]).Interface().(knftables.Object)}
	}
	err, _ = read(v, txFields[0]).Interface().(error)
	return cmds, err
}
