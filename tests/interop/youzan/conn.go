package main

import (
	"github.com/nsqio/go-nsq"
)

// frame is what a connection's read loop hands over: a response, an error frame, or the end
// of the connection (closed).
type frame struct {
	data   []byte
	isErr  bool
	closed bool
}

// delegate is the go-nsq ConnDelegate shared by producer and consumer connections: responses,
// error frames and the connection's end go to frames (for a producer, which waits for each
// reply), messages to onMessage (for a consumer).
type delegate struct {
	frames    chan frame
	onMessage func(*nsq.Conn, *nsq.Message)
	onError   func(*nsq.Conn, []byte)
	onClose   func(*nsq.Conn)
}

func newDelegate() *delegate {
	return &delegate{frames: make(chan frame, 16)}
}

func (d *delegate) push(f frame) {
	select {
	case d.frames <- f:
	default: // nobody waits (a consumer): drop, the callbacks below carry what matters
	}
}

func (d *delegate) OnResponse(_ *nsq.Conn, data []byte) {
	d.push(frame{data: append([]byte(nil), data...)})
}

func (d *delegate) OnError(c *nsq.Conn, data []byte) {
	d.push(frame{data: append([]byte(nil), data...), isErr: true})
	if d.onError != nil {
		d.onError(c, data)
	}
}

func (d *delegate) OnMessage(c *nsq.Conn, m *nsq.Message) {
	if d.onMessage != nil {
		d.onMessage(c, m)
	}
}

func (d *delegate) OnMessageFinished(*nsq.Conn, *nsq.Message) {}
func (d *delegate) OnMessageRequeued(*nsq.Conn, *nsq.Message) {}
func (d *delegate) OnBackoff(*nsq.Conn)                       {}
func (d *delegate) OnContinue(*nsq.Conn)                      {}
func (d *delegate) OnResume(*nsq.Conn)                        {}
func (d *delegate) OnHeartbeat(*nsq.Conn)                     {}
func (d *delegate) OnIOError(c *nsq.Conn, _ error)            { c.Close() }

func (d *delegate) OnClose(c *nsq.Conn) {
	d.push(frame{closed: true})
	if d.onClose != nil {
		d.onClose(c)
	}
}

// dial opens a V2 connection (magic and IDENTIFY) with quiet go-nsq logging.
func dial(addr string, cfg *nsq.Config, d *delegate) (*nsq.Conn, error) {
	conn := nsq.NewConn(addr, cfg, d)
	conn.SetLoggerLevel(nsq.LogLevelError)
	if _, err := conn.Connect(); err != nil {
		return nil, err
	}
	return conn, nil
}
