"""datapath"""
