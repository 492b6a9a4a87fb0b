package api

// UdevRemoveRequest is the body of POST /v1/udev/remove: the block device
// node (/dev/NAME) a udev remove event named.
type UdevRemoveRequest struct {
	Device string `json:"device"`
}

// UdevRemoveReply says what the daemon did: Done is "" when the device
// was no running volume's member; Ignored says why nothing was looked at
// (the device is still there: a synthetic event).
type UdevRemoveReply struct {
	Done    string `json:"done"`
	Ignored string `json:"ignored,omitempty"`
}

// UdevRemove tells the daemon that device went away.
func (c *Client) UdevRemove(device string) (UdevRemoveReply, error) {
	var out UdevRemoveReply
	err := c.do("POST", "/v1/udev/remove", UdevRemoveRequest{Device: device}, &out)
	return out, err
}
